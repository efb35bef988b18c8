"""POST /tokenize and /detokenize, in vLLM's shape and in llama.cpp's server's.

vLLM: {"prompt": str | "messages": [...], "add_special_tokens"?, "add_generation_prompt"?} ->
{"count", "max_model_len", "tokens"}; with `messages`, also chat's `tools`, `chat_template_kwargs`,
`continue_final_message` and `chat_template`, so the tokens are those of the prompt a chat request
with the same fields is given; {"tokens": [...]} -> {"prompt"}. llama.cpp:
{"content", "add_special"?, "with_pieces"?} -> {"tokens"} (ids, or {"id", "piece"} pairs);
{"tokens"} -> {"content"}. GET /tokenizer_info: vLLM's description of the tokenizer (its special
tokens and chat template), which remote-tokenizer clients such as lm-eval read. A prompt without an explicit special-token choice is tokenized by the
engine's own rule (engine/prompt.py), so the count is the count a completion would hold.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.http import JsonResponse

from ...engine.prompt import prompt_token_ids
from ..common.chat_messages import parse_messages
from ..common.chat_template import render_request
from ..common.endpoint import api_endpoint, served_for, served_model
from ..common.errors import bad_request
from ..common.request_body import parse_json_body
from ..common.sampling_fields import check_unknown_fields
from ..common.tool_calls import tools_from_body
from ..common.tool_parsers import tool_parser_for
from ..openai.request import template_options

TOKENIZE_FIELDS = {
    "model",
    "prompt",
    "messages",
    "add_special_tokens",
    "add_generation_prompt",
    "content",
    "add_special",
    "with_pieces",
    "tools",
    "tool_choice",
    "chat_template",
    "chat_template_kwargs",
    "continue_final_message",
}
CHAT_ONLY = ("tools", "tool_choice", "chat_template", "chat_template_kwargs", "continue_final_message")
DETOKENIZE_FIELDS = {"model", "tokens"}


def _flag(body: dict, name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise bad_request(f"{name} must be a boolean", param=name)
    return value


def _encode(tokenizer, text: str, add_special: bool | None) -> list[int]:
    if add_special is None:
        return prompt_token_ids(tokenizer, text)
    return list(tokenizer(text, add_special_tokens=add_special).input_ids)


@api_endpoint("POST")
async def tokenize(request):
    body = parse_json_body(request)
    check_unknown_fields(body, TOKENIZE_FIELDS)
    async with served_for(body) as served:
        # a long text takes milliseconds to tokenize (its pieces as long again): in a worker thread, as
        # a completion's prompt is, so the event loop keeps delivering every other stream's tokens
        return JsonResponse(await asyncio.to_thread(_tokenized, served.info, body))


def _tokenized(info, body: dict) -> dict:
    """/tokenize's answer (run off the event loop): vLLM's shape, or llama.cpp's for `content`."""
    tokenizer = info.tokenizer
    given = [name for name in ("prompt", "messages", "content") if name in body]
    if len(given) != 1:
        raise bad_request("send exactly one of prompt, messages (vLLM) or content (llama.cpp)", param="prompt")
    if given[0] == "content":  # llama.cpp's server
        content = _text(body["content"], "content")
        ids = _encode(tokenizer, content, bool(_flag(body, "add_special")))
        if _flag(body, "with_pieces"):
            return {"tokens": [{"id": i, "piece": tokenizer.decode([i])} for i in ids]}
        return {"tokens": ids}
    if given[0] == "messages":
        messages = parse_messages(body["messages"])
        tools = tools_from_body(body, tool_parser_for(tokenizer))
        options = template_options(body)
        continue_final = options.get("continue_final", False)
        options.setdefault("add_generation_prompt", not continue_final)
        text = render_request(tokenizer, messages, tools, options=options, continue_final=continue_final)
    else:
        extra = next((name for name in CHAT_ONLY if name in body), None)
        if extra is not None:
            raise bad_request(f"{extra} is only taken with messages", param=extra)
        text = _text(body["prompt"], "prompt")
    ids = _encode(tokenizer, text, _flag(body, "add_special_tokens"))
    return {"count": len(ids), "max_model_len": info.max_model_len, "tokens": ids}


@api_endpoint("POST")
async def detokenize(request):
    body = parse_json_body(request)
    check_unknown_fields(body, DETOKENIZE_FIELDS)
    async with served_for(body) as served:
        info = served.info
    ids = body.get("tokens")
    vocab = info.vocab_size
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise bad_request("tokens must be a list of token ids", param="tokens")
    if vocab and any(t < 0 or t >= vocab for t in ids):
        raise bad_request(f"token ids must be in [0, {vocab})", param="tokens")
    text = await asyncio.to_thread(info.tokenizer.decode, ids)  # a long list: off the loop, as /tokenize
    return JsonResponse({"prompt": text, "content": text})  # vLLM's name and llama.cpp's


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"{param} must be a string", param=param)
    return value


@api_endpoint("GET", "HEAD")
async def tokenizer_info(request):
    """vLLM's GET /tokenizer_info: the special tokens, the chat template and the length limit (of
    the model `?model=` names, else the default one)."""
    async with served_model(request.GET.get("model") or None) as served:
        model_info = served.info
    tokenizer = model_info.tokenizer
    info = {"tokenizer_class": type(tokenizer).__name__, "model_max_length": model_info.max_model_len}
    for name in ("eos_token", "bos_token", "pad_token", "unk_token"):
        value = getattr(tokenizer, name, None)
        info[name] = value if isinstance(value, str) else None
    info["chat_template"] = getattr(tokenizer, "chat_template", None)
    return JsonResponse(info)
