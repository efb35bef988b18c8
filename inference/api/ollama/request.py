"""Ollama's /api/chat and /api/generate requests, read into the request model underneath by way of
OpenAI's chat and completions bodies (api/openai/request.py), so every rule of those holds here.

What maps: `messages` (text; an assistant's `tool_calls` with `arguments` as an object; a `tool`
message's `tool_name`), `tools` (OpenAI's shape, as Ollama takes them), `format` ("json", or a JSON
schema), `options` (`num_predict` is max_tokens, -1 and -2 meaning as much as the context holds;
`temperature`, `top_p`, `top_k`, `min_p`, `seed`, `stop`, `repeat_penalty`, `presence_penalty`,
`frequency_penalty`; `num_ctx` and Ollama's runner settings are accepted and change nothing: the
context is the served model's), `think` (the template's thinking switch, or a reasoning effort),
`stream` (true unless false, as Ollama's). `/api/generate` renders `prompt` (and `system`) through
the chat template unless `raw`, and fills in the middle with `suffix`. `keep_alive` (the views
hand it to the model registry) sets how long the model stays loaded once idle. Images are refused
(the served models read text).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ...serving.generation_input import GenerationInput
from ..common.errors import bad_request
from ..common.sampling_fields import check_unknown_fields
from ..common.tool_parsers import ToolParser
from ..openai.request import parse_chat, parse_completion

SAMPLING_OPTIONS = {
    "num_predict": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "repeat_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
# Ollama's runner settings: accepted, and nothing here changes (the context and the threads are the server's)
RUNNER_OPTIONS = {
    "num_ctx",
    "num_keep",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "num_thread",
    "repeat_last_n",
    "typical_p",
    "tfs_z",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "penalize_newline",
    "numa",
    "use_mmap",
    "use_mlock",
    "low_vram",
    "vocab_only",
}
CHAT_FIELDS = {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think"}
EMBED_FIELDS = {"model", "input", "truncate", "options", "keep_alive", "dimensions"}
GENERATE_FIELDS = {
    "model",
    "prompt",
    "suffix",
    "system",
    "raw",
    "format",
    "options",
    "stream",
    "keep_alive",
    "think",
    "context",
    "images",
}


@dataclass
class OllamaRequest:
    """A request read: the engine's input (its history row names the Ollama path it came by), and
    what the reply needs to know."""

    inp: GenerationInput | None  # None: /api/generate with no prompt, which only loads the model
    model: str
    kind: str  # "chat" or "generate"

    def __post_init__(self):
        if self.inp is not None:
            self.inp = dataclasses.replace(self.inp, endpoint=f"ollama.{self.kind}")


def _check_fields(body: dict, allowed: set[str]) -> None:
    check_unknown_fields(body, allowed)
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad_request("model is required", param="model")


def model_name(value):
    """A request's model: Ollama's names carry a tag, and `name:latest` is the model `name`."""
    return value.removesuffix(":latest") if isinstance(value, str) else value


def _options(body: dict) -> dict:
    """The request's `options` as OpenAI body fields."""
    options = body.get("options")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise bad_request("options must be an object", param="options")
    fields = {}
    for name, value in options.items():
        if name in RUNNER_OPTIONS:
            continue
        if name not in SAMPLING_OPTIONS:
            raise bad_request(f"unknown option {name!r}", param=f"options.{name}")
        if name == "num_predict" and isinstance(value, int) and value < 0:
            continue  # -1: until the end of the turn, -2: until the context is full (the server's cap either way)
        fields[SAMPLING_OPTIONS[name]] = value
    if isinstance(fields.get("stop"), str):
        fields["stop"] = [fields["stop"]]
    return fields


def _format(body: dict) -> dict:
    form = body.get("format")
    if form is None or form == "":
        return {}
    if form == "json":
        return {"response_format": {"type": "json_object"}}
    if isinstance(form, dict):
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "format", "schema": form}}}
    raise bad_request('format must be "json" or a JSON schema', param="format")


def _think(body: dict) -> dict:
    think = body.get("think")
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"chat_template_kwargs": {"enable_thinking": think}}
    if think in ("low", "medium", "high"):
        return {"reasoning_effort": think}
    raise bad_request("think must be true, false, low, medium or high", param="think")


def _common(body: dict) -> dict:
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise bad_request("stream must be a boolean", param="stream")
    return {"model": model_name(body["model"]), "stream": stream, **_options(body), **_format(body)}


def _message(message: Any, index: int) -> dict:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad_request(f"{param} must be an object", param=param)
    if message.get("images"):
        raise bad_request(f"{param}.images: the served model reads text only", param=f"{param}.images")
    role = message.get("role")
    chat = {"role": role, "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise bad_request(f"{param}.tool_calls must be a list", param=f"{param}.tool_calls")
        chat["tool_calls"] = []
        for number, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise bad_request(f"{param}.tool_calls[{number}] needs function.name", param=f"{param}.tool_calls")
            arguments = function.get("arguments") or {}
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            call_id = call.get("id") or f"call_{index}_{number}"
            chat["tool_calls"].append(
                {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": text}}
            )
    if role == "tool" and isinstance(message.get("tool_name"), str):
        chat["name"] = message["tool_name"]
    return chat


def parse_chat_request(body: dict, parser: ToolParser) -> OllamaRequest:
    _check_fields(body, CHAT_FIELDS)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", param="messages")
    chat = {**_common(body), **_think(body), "messages": [_message(m, i) for i, m in enumerate(messages)]}
    if body.get("tools"):
        chat["tools"] = body["tools"]
    inp = parse_chat(chat, parser)
    return OllamaRequest(inp, body["model"], "chat")


def parse_generate_request(body: dict, parser: ToolParser, *, templated: bool = True) -> OllamaRequest:
    """`templated`: the model has a chat template; a base model's prompt goes as it is (Ollama's
    template for a model without one is the prompt alone), after the system text if there is one."""
    _check_fields(body, GENERATE_FIELDS)
    if body.get("images"):
        raise bad_request("images: the served model reads text only", param="images")
    prompt, suffix, system = body.get("prompt"), body.get("suffix"), body.get("system")
    for name, value in (("prompt", prompt), ("suffix", suffix), ("system", system)):
        if value is not None and not isinstance(value, str):
            raise bad_request(f"{name} must be a string", param=name)
    prompt = prompt or ""
    common = _common(body)
    if not prompt and not suffix:
        return OllamaRequest(None, body["model"], "generate")  # Ollama's way to load a model
    if body.get("raw") or suffix is not None or not templated:  # the prompt as it is, or the code before a gap to fill
        if not templated and not body.get("raw") and system:
            prompt = f"{system}\n\n{prompt}"
        fields = {**common, "prompt": prompt, **({"suffix": suffix} if suffix is not None else {})}
        return OllamaRequest(parse_completion(fields, default_max_tokens=None), body["model"], "generate")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    inp = parse_chat({**common, **_think(body), "messages": messages}, parser)
    return OllamaRequest(inp, body["model"], "generate")
