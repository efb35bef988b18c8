"""Anthropic's Messages request (POST /v1/messages, /v1/messages/count_tokens) read into the one
request model underneath: chat messages for the template, a ToolRequest, SamplingParams.

The translation is at the edge only: `system` becomes the system message, `tool_use` blocks the
assistant's `tool_calls` (as chat's, under their ids), each
`tool_result` a `tool` message, `tools` / `tool_choice` OpenAI's function tools (`any` is
`required`, `tool` names one), `stop_sequences` the stop strings, `output_config.format` (or the beta's
`output_format`) a JSON schema constraint; image and document blocks are refused with a 400 (the
served model reads text). A last `assistant` message is a prefill the reply continues, as Anthropic's
API does. Rejections name the field as Anthropic's API spells it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...serving.generation_input import GenerationInput
from ..common.chat_messages import call_object, tool_result, with_result_names
from ..common.errors import ApiError, bad_request
from ..common.sampling_fields import ENGINE_SAMPLING_FIELDS, check_limits, expect, sampling_params, without_nulls
from ..common.tool_calls import ToolRequest, tool_trigger, tools_from_body
from ..common.tool_parsers import ToolParser

# Fields of Anthropic's reference that change nothing here (caching hints, routing, tiers, ids).
IGNORED_FIELDS = {
    "metadata",
    "service_tier",
    "cache_control",
    "container",
    "diagnostics",
    "inference_geo",
    "speed",
    "user_profile_id",
    "workspace_id",
    "context_management",
}
PROMPT_FIELDS = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "output_format"}
PROMPT_FIELDS |= IGNORED_FIELDS
# vLLM's extra sampling fields are taken here too; `stop` is Anthropic's stop_sequences.
MESSAGES_FIELDS = (
    PROMPT_FIELDS | {"max_tokens", "stream", "stop_sequences", "mcp_servers", "keep_alive"} | (ENGINE_SAMPLING_FIELDS - {"stop"})
)
COUNT_TOKENS_FIELDS = PROMPT_FIELDS
THINKING_TYPES = {"enabled", "disabled", "adaptive", "between_tools"}
MEDIA_BLOCKS = {"image": "image", "document": "document (PDF or text file)", "search_result": "search result"}


def _media_refused(kind: str, where: str) -> ApiError:
    """A 400 for an image or document block: the served model reads text only."""
    return bad_request(
        f"{where}: {MEDIA_BLOCKS[kind]} input is not supported: the served model is a text model and reads text "
        "blocks only (send the content as text)",
        param=where,
    )


@dataclass
class MessagesPrompt:
    """What the chat template renders: messages, tools, and whether the last turn is a prefill."""

    model: str
    messages: list[dict]
    tools: ToolRequest | None
    continue_final: bool  # the last message is the assistant's: the reply continues it
    template_options: dict = field(default_factory=dict)  # thinking on or off (enable_thinking)
    thinking_budget: int | None = None


def check_unknown(body: dict, allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad_request(f"{unknown[0]}: Extra inputs are not permitted", param=unknown[0], code="unknown_field")


def _text_blocks(value: Any, param: str) -> str:
    """A string, or text blocks joined (system, tool_result content)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"{param} must be a string or a list of text blocks", param=param)
    parts = []
    for index, block in enumerate(value):
        if isinstance(block, dict) and block.get("type") in MEDIA_BLOCKS:
            raise _media_refused(block["type"], f"{param}.{index}")
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise bad_request(f"{param}.{index}: only text blocks are supported here", param=f"{param}.{index}")
        parts.append(block["text"])
    return "\n".join(parts)


def _tool_use_call(block: dict, param: str) -> dict:
    name, arguments = block.get("name"), block.get("input")
    if not isinstance(name, str) or not isinstance(arguments, dict) or not isinstance(block.get("id"), str):
        raise bad_request(f"{param}: a tool_use block needs id, name and an input object", param=param)
    return call_object(block["id"], name, arguments)


def _tool_result(block: dict, param: str) -> dict:
    if not isinstance(block.get("tool_use_id"), str):
        raise bad_request(f"{param}.tool_use_id: Field required", param=f"{param}.tool_use_id")
    content = _text_blocks(block.get("content", ""), f"{param}.content")
    is_error = expect(block, "is_error", bool, "a boolean")
    return tool_result(f"Error: {content}" if is_error else content, block["tool_use_id"])


def _message(message: Any, index: int) -> list[dict]:
    """One Anthropic message as chat messages: a user turn's tool results come first, as `tool`
    messages; an assistant turn's tool_use blocks are its tool_calls."""
    param = f"messages.{index}"
    if not isinstance(message, dict):
        raise bad_request(f"{param} must be an object", param=param)
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise bad_request(f"{param}.role must be user or assistant, got {role!r}", param=f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"{param}.content must be a string or a list of content blocks", param=f"{param}.content")
    texts, calls, results = [], [], []
    for number, block in enumerate(content):
        where = f"{param}.content.{number}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use_call(block, where))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, where))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # an earlier turn's reasoning: templates leave it out of the prompt
        elif kind in MEDIA_BLOCKS:
            raise _media_refused(kind, where)
        else:
            raise bad_request(
                f"{where}: content blocks of type {kind!r} are not supported in a {role} message "
                "(text, tool_use in assistant turns, tool_result in user turns)",
                param=where,
            )
    text = "\n".join(texts)
    turn = [{"role": role, "content": text, **({"tool_calls": calls} if calls else {})}] if text or calls or not results else []
    return results + turn


def _tools(body: dict, parser: ToolParser) -> ToolRequest | None:
    """Anthropic's tools and tool_choice as OpenAI's function tools (api/common/tool_calls.py)."""
    tools = expect(body, "tools", list, "a list of tools")
    choice = expect(body, "tool_choice", dict, "an object")
    functions = []
    for index, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise bad_request(f"tools.{index} must be an object", param=f"tools.{index}")
        if tool.get("type", "custom") != "custom":
            raise bad_request(
                f"tools.{index}: tool type {tool['type']!r} is not supported (custom tools only)", param=f"tools.{index}"
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise bad_request(
                f"tools.{index}.input_schema: a JSON schema object is required", param=f"tools.{index}.input_schema"
            )
        function = {"name": tool.get("name")}  # in OpenAI's order: the template writes the same tools as for chat
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        function["parameters"] = schema
        if "strict" in tool:  # strict tool use: the input matches the schema exactly
            function["strict"] = tool["strict"]
        functions.append({"type": "function", "function": function})
    openai_choice, parallel = "auto", None
    if choice is not None:
        kind = choice.get("type")
        if kind not in ("auto", "any", "tool", "none"):
            raise bad_request(f"tool_choice.type must be auto, any, tool or none, got {kind!r}", param="tool_choice.type")
        if kind == "tool" and not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice.name: Field required for type tool", param="tool_choice.name")
        openai_choice = {"auto": "auto", "any": "required", "none": "none"}.get(kind) or {
            "type": "function",
            "function": {"name": choice["name"]},
        }
        disable = expect(choice, "disable_parallel_tool_use", bool, "a boolean")
        parallel = None if disable is None else not disable
    if not functions and openai_choice not in ("auto", "none"):
        raise bad_request("tool_choice needs tools", param="tool_choice")
    translated = {"tools": functions, "tool_choice": openai_choice if functions else "none"}
    if parallel is not None:
        translated["parallel_tool_calls"] = parallel
    return tools_from_body(translated, parser)


def _thinking(body: dict) -> tuple[dict, int | None]:
    """(the template options, the thinking budget): `enabled` / `disabled` switch a thinking
    template's reasoning on or off (its `enable_thinking`); `budget_tokens` ends it when spent."""
    thinking = expect(body, "thinking", dict, "an object")
    if thinking is None:  # Anthropic's default is no extended thinking
        return {"kwargs": {"enable_thinking": False}}, None
    if thinking.get("type") not in THINKING_TYPES:
        raise bad_request(f"thinking.type must be one of {', '.join(sorted(THINKING_TYPES))}", param="thinking.type")
    if thinking["type"] == "disabled":
        return {"kwargs": {"enable_thinking": False}}, None
    budget = thinking.get("budget_tokens")
    if thinking["type"] == "enabled" and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
        raise bad_request("thinking.budget_tokens must be a positive integer", param="thinking.budget_tokens")
    return {"kwargs": {"enable_thinking": True}}, budget


def _output_format(body: dict) -> dict | None:
    """output_config.format (Anthropic's structured outputs): a JSON schema the reply must match.
    The beta's top-level `output_format` (the structured-outputs-2025-11-13 beta, which older
    clients still send) is read as the same."""
    config = expect(body, "output_config", dict, "an object")
    form = config.get("format") if config else None
    if body.get("output_format") is not None:
        if form is not None:
            raise bad_request("send output_config.format or the beta's output_format, not both", param="output_format")
        form = body["output_format"]
    if form is None:
        return None
    if not isinstance(form, dict) or form.get("type") != "json_schema" or not isinstance(form.get("schema"), dict):
        raise bad_request("output_config.format must be {type: json_schema, schema: {...}}", param="output_config.format")
    return {"kind": "json_schema", "value": form["schema"], "param": "output_config.format"}


def parse_prompt(body: dict, parser: ToolParser) -> MessagesPrompt:
    """The fields that make the prompt (shared by /v1/messages and count_tokens)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad_request("model: Field required", param="model")
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise bad_request("messages: a non-empty list of messages is required", param="messages")
    messages = []
    if "system" in body:
        system = _text_blocks(body["system"], "system")
        if system:
            messages.append({"role": "system", "content": system})
    for index, message in enumerate(value):
        messages.extend(_message(message, index))
    options, budget = _thinking(body)
    # a prefill: the last turn is the assistant's own text (a tool call or thinking alone is no prefill)
    last = value[-1]
    continue_final = last.get("role") == "assistant" and bool(messages[-1]["content"]) and messages[-1]["role"] == "assistant"
    if continue_final and isinstance(last.get("content"), list):
        continue_final = not any(isinstance(b, dict) and b.get("type") == "tool_use" for b in last["content"])
    return MessagesPrompt(body["model"], with_result_names(messages), _tools(body, parser), continue_final, options, budget)


def parse_messages_request(body: dict, parser: ToolParser) -> tuple[GenerationInput, MessagesPrompt]:
    """POST /v1/messages: the request the engine runs, and the prompt it renders."""
    body = without_nulls(body)
    check_unknown(body, MESSAGES_FIELDS)
    if body.get("mcp_servers"):
        raise bad_request("mcp_servers: MCP connectors are not supported by this server", param="mcp_servers")
    prompt = parse_prompt(body, parser)
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise bad_request("max_tokens: Field required", param="max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise bad_request(f"max_tokens must be an integer >= 1, got {json.dumps(max_tokens)}", param="max_tokens")
    stops = expect(body, "stop_sequences", list, "a list of strings")
    fields = {key: value for key, value in body.items() if key in ENGINE_SAMPLING_FIELDS}
    if stops:
        if not all(isinstance(s, str) and s for s in stops):
            raise bad_request("stop_sequences must be a list of non-empty strings", param="stop_sequences")
        fields["stop"] = stops
    max_tokens = check_limits({**fields, "stop": stops or []}, max_tokens, "max_tokens", defaulted=False)
    structured = _output_format(body)
    tools = prompt.tools
    grammar = tools.grammar() if tools is not None else None
    if grammar is not None:  # any / tool: the call's shape is forced
        if structured is not None:
            raise bad_request("tool_choice any or tool cannot be combined with output_config.format", param="tool_choice")
        structured = {"kind": "lark", "value": grammar, "param": "tool_choice"}
    try:
        params = sampling_params(
            fields,
            max_tokens=max_tokens,
            max_tokens_param="max_tokens",
            logprobs=None,
            structured=structured,
            tool_trigger=tool_trigger(tools, structured),
        )
    except ApiError as exc:
        if exc.param == "stop":
            exc.param, exc.message = "stop_sequences", exc.message.replace("stop", "stop_sequences")
        raise
    stream = expect(body, "stream", bool, "a boolean")
    given = frozenset(fields) | ({"max_tokens"} if "max_tokens" in body else frozenset())
    inp = GenerationInput(
        endpoint="messages",
        params=params,
        messages=prompt.messages,
        model=prompt.model,
        stream=bool(stream),
        given=given,
        tools=tools,
        template_options=prompt.template_options,
        thinking_budget=prompt.thinking_budget,
    )
    return inp, prompt


def parse_count_tokens(body: dict, parser: ToolParser) -> MessagesPrompt:
    """POST /v1/messages/count_tokens: the prompt only."""
    body = without_nulls(body)
    check_unknown(body, COUNT_TOKENS_FIELDS)
    _output_format(body)
    return parse_prompt(body, parser)
