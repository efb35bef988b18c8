"""Chat messages as clients send them, checked and kept as the chat templates take them: text
content, an assistant turn's `tool_calls` with `function.arguments` parsed into an object (as
transformers' templates and vLLM take them), a tool message with its `tool_call_id` and the `name`
of the call it answers. How each template writes them is chat_template.py's concern.

The Responses and Anthropic APIs build the same shapes (`call_object`, `tool_result`), so one
history renders the same through every API."""

from __future__ import annotations

import json
from typing import Any

from .errors import bad_request

CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}


def _message_content(content: Any, index: int) -> str:
    param = f"messages[{index}].content"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request("only text content parts are supported", param=param)
            parts.append(part["text"])
        return "".join(parts)
    raise bad_request(f"{param} must be a string or a list of text parts", param=param)


def call_object(call_id: str, name: str, arguments: dict) -> dict:
    """One earlier call as templates take it."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(content: str, call_id: str | None, name: str | None = None) -> dict:
    """One tool result as templates take it (`name` filled from its call by `with_result_names`)."""
    message = {"role": "tool", "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    if name is not None:
        message["name"] = name
    return message


def arguments_object(arguments: Any, param: str) -> dict:
    """A call's arguments (a JSON object string, as OpenAI sends them, or an object) as an object."""
    try:
        parsed = json.loads(arguments or "{}") if isinstance(arguments, str) or arguments is None else arguments
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise bad_request(f"{param}: function.arguments must be a JSON object string", param=param)
    return parsed


def _tool_calls(calls: Any, index: int) -> list[dict]:
    param = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise bad_request(f"{param} must be a list", param=param)
    objects = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"{param}: each call needs function.name and function.arguments", param=param)
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{index}_{number}"
        objects.append(call_object(call_id, function["name"], arguments_object(function.get("arguments"), param)))
    return objects


def with_result_names(messages: list[dict]) -> list[dict]:
    """The messages with each tool result naming the call it answers: its `name` from the call its
    `tool_call_id` gives, and where it gives none, the earlier turn's calls in order (as llama.cpp
    pairs them). The messages given are left as they are."""
    names, waiting, named = {}, [], []
    for message in messages:
        if message["role"] == "assistant" and message.get("tool_calls"):
            names.update({call["id"]: call["function"]["name"] for call in message["tool_calls"]})
            waiting = [call["id"] for call in message["tool_calls"]]
        elif message["role"] == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None and waiting:
                call_id = waiting[0]
                message = {**message, "tool_call_id": call_id}
            if call_id in waiting:
                waiting.remove(call_id)
            if "name" not in message and call_id in names:
                message = {**message, "name": names[call_id]}
        named.append(message)
    return named


def parse_messages(value: Any) -> list[dict]:
    """Chat messages as the templates take them (module docstring); `developer` is `system`."""
    if not isinstance(value, list) or not value:
        raise bad_request("messages must be a non-empty list", param="messages")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise bad_request(f"messages[{index}] must be an object", param=f"messages[{index}]")
        role = message.get("role")
        if not isinstance(role, str) or role not in CHAT_ROLES:  # a list or object is not hashable
            raise bad_request(
                f"messages[{index}].role must be one of {', '.join(sorted(CHAT_ROLES))}, got {role!r}",
                param=f"messages[{index}].role",
            )
        if "content" not in message and role != "assistant":
            raise bad_request(f"messages[{index}].content is required", param=f"messages[{index}].content")
        content = _message_content(message.get("content"), index)
        if role == "tool":
            call_id, name = message.get("tool_call_id"), message.get("name")
            messages.append(
                tool_result(content, call_id if isinstance(call_id, str) else None, name if isinstance(name, str) else None)
            )
            continue
        entry = {"role": "system" if role == "developer" else role, "content": content}
        if role == "assistant" and message.get("tool_calls"):
            entry["tool_calls"] = _tool_calls(message["tool_calls"], index)
        messages.append(entry)
    return with_result_names(messages)
