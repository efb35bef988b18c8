"""Chat messages as clients send them, normalised to [{"role", "content": str}] for the chat
template; an assistant turn's tool_calls are written back in the served model's call format."""

from __future__ import annotations

import json
from typing import Any

from .errors import bad_request
from .tool_parsers import HermesToolParser, ToolParser

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


def _tool_calls_text(calls: Any, index: int, parser: ToolParser) -> str:
    param = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise bad_request(f"{param} must be a list", param=param)
    parsed_calls = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"{param}: each call needs function.name and function.arguments", param=param)
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            raise bad_request(f"{param}: function.arguments must be a JSON object string", param=param) from None
        if not isinstance(parsed, dict):
            raise bad_request(f"{param}: function.arguments must be a JSON object string", param=param)
        parsed_calls.append((function["name"], parsed))
    return parser.calls_text(parsed_calls)


def parse_messages(value: Any, tool_parser: ToolParser | None = None) -> list[dict]:
    """Chat messages, normalised to [{"role", "content": str}] for the chat template; an assistant
    turn's tool_calls become its content, written in the served model's call format."""
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
        if message.get("tool_calls"):  # an earlier turn's calls, written back as the model wrote them
            calls = _tool_calls_text(message["tool_calls"], index, tool_parser or HermesToolParser())
            content = (content + "\n" if content else "") + calls
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    return messages
