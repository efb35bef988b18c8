"""OpenAI's Responses request (POST /v1/responses, /v1/responses/input_tokens) read into the one
request model underneath: chat messages for the template, a ToolRequest, SamplingParams.

`input` is a string or a list of items: `message`s (string content or `input_text` /
`output_text` parts), `function_call`s (an assistant turn's `tool_calls`, as chat's) and
`function_call_output`s (`tool` messages naming their call);
`reasoning` items of earlier turns are left out of the prompt, as templates leave reasoning out.
`instructions` is the system message (not carried to a continuation, as OpenAI does: the
instructions of the response `previous_response_id` names are not in the prompt, this request's
are); function tools are chat's function tools (`strict` honoured), `tool_choice` a mode, a named
function or `allowed_tools`, `max_tool_calls` caps the calls of the reply; `text.format` is a JSON
schema or JSON object constraint; `max_output_tokens` is max_tokens; `include`
["message.output_text.logprobs"] with `top_logprobs` puts the tokens' logprobs on the output text;
`truncation: "auto"` drops the oldest turns of a conversation too long for the context (the
chat template's renderer does it: common/chat_template.py), "disabled" (the default) refuses it.
`previous_response_id` is resolved by the view (it needs the database): its conversation goes
before this input.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ...serving.generation_input import GenerationInput
from ..common.chat_messages import arguments_object, call_object, tool_result, with_result_names
from ..common.errors import ApiError, bad_request
from ..common.extra_fields import drop_ignored
from ..common.sampling_fields import (
    ENGINE_SAMPLING_FIELDS,
    check_limits,
    check_unknown_fields,
    expect,
    model_name,
    sampling_params,
    with_aliases,
    without_nulls,
)
from ..common.tool_calls import ToolRequest, tool_trigger, tools_from_body
from ..common.tool_parsers import ToolParser
from ..openai.request import REASONING_EFFORTS, thinking_budget

PROMPT_FIELDS = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "previous_response_id"}
PROMPT_FIELDS |= {"reasoning", "text", "conversation", "prompt", "truncation"}
RESPONSES_FIELDS = PROMPT_FIELDS | {
    "max_output_tokens",
    "stream",
    "stream_options",
    "store",
    "metadata",
    "user",
    "background",
    "keep_alive",
}
RESPONSES_FIELDS |= {"thinking_token_budget", "include", "top_logprobs", "max_tool_calls"} | ENGINE_SAMPLING_FIELDS
OUTPUT_LOGPROBS = "message.output_text.logprobs"
# What `include` may name (OpenAI's list): the output text's logprobs are honoured; the others name
# outputs this server never makes (hosted tools' results, images, encrypted reasoning) and add nothing.
INCLUDABLE = {
    OUTPUT_LOGPROBS,
    "reasoning.encrypted_content",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
}
TRUNCATIONS = ("auto", "disabled")
ROLES = {"user", "system", "developer", "assistant"}


@dataclass
class ResponsesPrompt:
    """The prompt's parts: this request's input as messages and as items (with ids, for
    input_items), the instructions, the tools, and the continuation asked for."""

    model: str | None
    messages: list[dict]  # this request's input only
    items: list[dict]  # the input items as given, each with an id
    instructions: str | None
    tools: ToolRequest | None
    previous_response_id: str | None
    template_options: dict = field(default_factory=dict)

    def conversation(self, earlier: list[dict]) -> list[dict]:
        """The messages the template renders: one system message first (the instructions, then any
        system or developer messages of the earlier turns and this input, which templates want
        first), the earlier turns, this input."""
        turns = earlier + self.messages
        system = [self.instructions] if self.instructions else []
        system += [m["content"] for m in turns if m["role"] == "system"]
        head = [{"role": "system", "content": "\n\n".join(system)}] if system else []
        return with_result_names(head + [m for m in turns if m["role"] != "system"])


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _parts_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param} must be a string or a list of content parts", param=param)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise bad_request(
                f"{param}[{index}]: content parts of type {kind!r} are not supported (text only)", param=f"{param}[{index}]"
            )
    return "".join(texts)


def _input(value: Any) -> tuple[list[dict], list[dict]]:
    """(chat messages, the items with ids) of `input`; consecutive function_calls are one assistant turn."""
    if isinstance(value, str):
        if not value:
            raise bad_request("input must not be empty", param="input")
        return [{"role": "user", "content": value}], [
            {"id": _item_id("msg"), "type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}
        ]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty list of items", param="input")
    messages, items, calls = [], [], []

    def flush_calls():
        if calls:  # the calls join the assistant's text just before them: one turn, as chat's
            said = (
                messages.pop() if messages and messages[-1]["role"] == "assistant" and "tool_calls" not in messages[-1] else None
            )
            messages.append({"role": "assistant", "content": said["content"] if said else "", "tool_calls": list(calls)})
            calls.clear()

    for index, item in enumerate(value):
        param = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_request(f"{param} must be an object", param=param)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise bad_request(f"{param}.role must be one of {', '.join(sorted(ROLES))}, got {role!r}", param=f"{param}.role")
            text = _parts_text(item.get("content"), f"{param}.content")
            flush_calls()
            messages.append({"role": "system" if role == "developer" else role, "content": text})
            content = item["content"] if isinstance(item["content"], list) else [{"type": "input_text", "text": text}]
            items.append({"id": item.get("id") or _item_id("msg"), "type": "message", "role": role, "content": content})
        elif kind == "function_call":
            name, arguments = item.get("name"), item.get("arguments")
            if not isinstance(name, str) or not isinstance(item.get("call_id"), str) or not isinstance(arguments, str):
                raise bad_request(f"{param}: a function_call needs call_id, name and arguments (a JSON string)", param=param)
            calls.append(call_object(item["call_id"], name, arguments_object(arguments, f"{param}.arguments")))
            items.append(
                {"id": item.get("id") or _item_id("fc"), **{k: item[k] for k in ("type", "call_id", "name", "arguments")}}
            )
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad_request(f"{param}.call_id is required", param=f"{param}.call_id")
            output = _parts_text(item.get("output", ""), f"{param}.output")
            flush_calls()
            messages.append(tool_result(output, item["call_id"]))
            items.append({"id": item.get("id") or _item_id("fco"), "type": kind, "call_id": item["call_id"], "output": output})
        elif kind == "reasoning":
            continue  # an earlier turn's reasoning: templates leave it out of the prompt
        else:
            raise bad_request(
                f"{param}: items of type {kind!r} are not supported (message, function_call, function_call_output)", param=param
            )
    flush_calls()
    if not messages:
        raise bad_request("input holds no message", param="input")
    return messages, items  # results are named by their calls in `conversation`, across earlier turns too


def _tool_choice(choice: Any) -> Any:
    """Responses' tool_choice as chat's: a mode, {type: function, name}, or {type: allowed_tools,
    mode, tools: [{type: function, name}]}; the hosted tools' choices are refused by name."""
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    if kind == "function":
        if not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice {type: function} needs the function's name", param="tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools":
        listed = choice.get("tools")
        if not isinstance(listed, list):
            raise bad_request("tool_choice allowed_tools needs mode and a list of tools", param="tool_choice")
        tools = []
        for tool in listed:
            if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
                raise bad_request(
                    "tool_choice allowed_tools may list function tools only ({type: function, name})", param="tool_choice"
                )
            tools.append({"type": "function", "function": {"name": tool["name"]}})
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode"), "tools": tools}}
    raise bad_request(
        f"tool_choice of type {kind!r} is not supported: none, auto, required, {{type: function, name}} or "
        "{type: allowed_tools, mode, tools}",
        param="tool_choice",
    )


def _tools(body: dict, parser: ToolParser) -> ToolRequest | None:
    """Responses' function tools ({type, name, parameters, strict}), tool_choice and max_tool_calls, as chat's."""
    tools = expect(body, "tools", list, "a list of tools")
    functions = []
    for index, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad_request(
                f"tools[{index}]: tools of type {kind!r} are not supported (function tools only)", param=f"tools[{index}]"
            )
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        functions.append({"type": "function", "function": function})
    most = expect(body, "max_tool_calls", int, "an integer")
    if most is not None and most < 0:
        raise bad_request(f"max_tool_calls must be >= 0, got {most}", param="max_tool_calls")
    choice = _tool_choice(body.get("tool_choice", "auto"))
    translated = {"tools": functions, "tool_choice": choice if functions or choice != "auto" else "none"}
    if "parallel_tool_calls" in body:
        translated["parallel_tool_calls"] = body["parallel_tool_calls"]
    return tools_from_body(translated, parser, max_calls=most)


def _output_logprobs(body: dict) -> int | None:
    """SamplingParams.logprobs: top_logprobs (default 0) when include asks for the output text's
    logprobs, else None (top_logprobs alone returns none, as OpenAI and vLLM read it)."""
    include = expect(body, "include", list, "a list of strings") or []
    for index, name in enumerate(include):
        if name not in INCLUDABLE:
            raise bad_request(f"include[{index}]: {name!r} is not one of {', '.join(sorted(INCLUDABLE))}", param="include")
    top = expect(body, "top_logprobs", int, "an integer")
    return (top or 0) if OUTPUT_LOGPROBS in include else None


def text_format(body: dict) -> dict | None:
    """text.format as the constraint engine/sample/structured.py compiles (None for plain text)."""
    text = expect(body, "text", dict, "an object")
    form = (text or {}).get("format")
    if form is None:
        return None
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"kind": "json_object", "value": None, "param": "text.format"}
    if kind == "json_schema" and isinstance(form.get("schema"), dict):
        return {"kind": "json_schema", "value": form["schema"], "param": "text.format"}
    raise bad_request(
        "text.format must be {type: text}, {type: json_object} or {type: json_schema, name, schema}", param="text.format"
    )


def _template_options(body: dict) -> dict:
    truncation = expect(body, "truncation", str, "a string")
    if truncation is not None and truncation not in TRUNCATIONS:
        raise bad_request(f"truncation must be auto or disabled, got {truncation!r}", param="truncation")
    # auto: the renderer drops the oldest turns until the prompt leaves `reserve` tokens of the context
    fit = {"truncation": {"reserve": 1}} if truncation == "auto" else {}
    reasoning = expect(body, "reasoning", dict, "an object") or {}
    effort = reasoning.get("effort")
    if effort is None:
        return fit
    if effort not in REASONING_EFFORTS:
        raise bad_request(f"reasoning.effort must be one of {', '.join(REASONING_EFFORTS)}", param="reasoning.effort")
    kwargs = {"reasoning_effort": effort}
    if effort == "none":  # no reasoning: templates with a thinking switch turn it off
        kwargs["enable_thinking"] = False
    return {"kwargs": kwargs, **fit}


def parse_prompt(body: dict, parser: ToolParser) -> ResponsesPrompt:
    """The fields that make the prompt (shared by /v1/responses and input_tokens)."""
    for name in ("conversation", "prompt"):
        if name in body:
            raise bad_request(f"{name} is not supported: send input (and previous_response_id)", param=name)
    if "input" not in body:
        raise bad_request("input is required", param="input")
    messages, items = _input(body["input"])
    instructions = expect(body, "instructions", str, "a string")
    previous = expect(body, "previous_response_id", str, "a string")
    return ResponsesPrompt(
        model_name(body), messages, items, instructions, _tools(body, parser), previous, _template_options(body)
    )


def _body(body: dict, allowed: set[str]) -> dict:
    body = drop_ignored(with_aliases(without_nulls(body)), allowed)
    check_unknown_fields(body, allowed)
    return body


@dataclass
class ResponsesRequest:
    """A /v1/responses request beside its GenerationInput: the prompt, whether to keep the
    response, and the settings the response object repeats."""

    prompt: ResponsesPrompt
    store: bool
    echoed: dict


def parse_responses_request(body: dict, parser: ToolParser) -> tuple[GenerationInput, ResponsesRequest]:
    """POST /v1/responses: the request the engine runs, and the prompt it renders."""
    body = _body(body, RESPONSES_FIELDS)
    if expect(body, "background", bool, "a boolean"):
        raise bad_request("background responses are not supported", param="background")
    prompt = parse_prompt(body, parser)
    max_tokens = expect(body, "max_output_tokens", int, "an integer")
    if max_tokens is not None and max_tokens < 1:
        raise bad_request(f"max_output_tokens must be >= 1, got {max_tokens}", param="max_output_tokens")
    fields = {key: value for key, value in body.items() if key in ENGINE_SAMPLING_FIELDS}
    checked = check_limits(fields, max_tokens, "max_output_tokens", defaulted=max_tokens is None)
    structured = text_format(body)
    grammar = prompt.tools.grammar() if prompt.tools is not None else None
    if grammar is not None:
        if structured is not None:
            raise bad_request("tool_choice required or named cannot be combined with text.format", param="tool_choice")
        structured = {"kind": "lark", "value": grammar, "param": "tool_choice"}
    top_logprobs = _output_logprobs(body)
    try:
        params = sampling_params(
            fields,
            max_tokens=checked,
            max_tokens_param="max_output_tokens",
            logprobs=top_logprobs,
            structured=structured,
            tool_trigger=tool_trigger(prompt.tools, structured),
        )
    except ApiError as exc:
        if exc.param == "logprobs":
            exc.param, exc.message = "top_logprobs", exc.message.replace("logprobs", "top_logprobs")
        raise
    if "truncation" in prompt.template_options:  # the room the reply needs beside the prompt
        prompt.template_options["truncation"]["reserve"] = params.max_tokens or max(1, params.min_tokens)
    stream = bool(expect(body, "stream", bool, "a boolean"))
    store = expect(body, "store", bool, "a boolean")
    metadata = expect(body, "metadata", dict, "an object")
    inp = GenerationInput(
        endpoint="responses",
        params=params,
        messages=prompt.messages,
        model=prompt.model,
        stream=stream,
        given=frozenset(fields) | ({"max_tokens"} if max_tokens is not None else frozenset()),
        tools=prompt.tools,
        template_options=prompt.template_options,
        thinking_budget=thinking_budget(body, "thinking_token_budget"),
    )
    store = True if store is None else store
    echoed = {  # the request's settings, repeated in the response object as OpenAI does
        "instructions": prompt.instructions,
        "max_output_tokens": max_tokens,
        "metadata": metadata or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": prompt.previous_response_id,
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": store,
        "truncation": body.get("truncation", "disabled"),
        "max_tool_calls": body.get("max_tool_calls"),
        "top_logprobs": body.get("top_logprobs", 0),
        "user": body.get("user"),
    }
    return inp, ResponsesRequest(prompt, store, echoed)


def parse_input_tokens(body: dict, parser: ToolParser) -> ResponsesPrompt:
    """POST /v1/responses/input_tokens: the prompt only."""
    body = _body(body, PROMPT_FIELDS)
    text_format(body)
    return parse_prompt(body, parser)
