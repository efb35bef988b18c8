"""Tool calling for /v1/chat/completions: the tools put into the prompt, the calls read back out.

The request's tools reach the model through its chat template when the template has a tools
section (it receives `tools=`), else through a generic system prompt (below) that asks for
SmolLM2's and Hermes' format: each call a JSON object {"name", "arguments"} between <tool_call>
and </tool_call>. `tool_choice` "required" or a named function forces that format with a grammar
built from the functions' parameter schemas (engine/structured.py, kind "lark"); "auto" lets the
model choose and the reply is parsed; "none" leaves the tools out.

A parser per model family would go in PARSERS; today every family uses the <tool_call> one.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)

GENERIC_PROMPT = """You can call functions. The available functions, as JSON schemas:
{tools}
To call one or more of them, reply with one line per call, each exactly
<tool_call>{{"name": <function name>, "arguments": <arguments as a JSON object>}}</tool_call>
and nothing else. Otherwise answer normally."""


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON object, as a string (OpenAI's shape)
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def body(self, index: int | None = None) -> dict:
        call = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


@dataclass
class ToolRequest:
    """A chat request's tools and tool_choice, validated."""

    tools: list[dict]  # each {"type": "function", "function": {"name", "description"?, "parameters"?}}
    choice: str | dict = "auto"  # none | auto | required | {"type": "function", "function": {"name"}}
    parallel: bool = True

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def functions(self) -> list[dict]:
        named = self.choice["function"]["name"] if isinstance(self.choice, dict) else None
        return [t["function"] for t in self.tools if named is None or t["function"]["name"] == named]

    def grammar(self) -> str | None:
        """Lark forcing one call (or several, with parallel_tool_calls) to the allowed functions, or
        None for "auto": llguidance's %json embeds each function's parameter schema."""
        if not self.active or self.choice == "auto":
            return None
        alternatives = []
        for function in self.functions:
            schema = {
                "type": "object",
                "properties": {
                    "name": {"const": function["name"]},
                    "arguments": function.get("parameters") or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
                "x-guidance": {"whitespace_flexible": False},  # compact: a model cannot pad forever
            }
            alternatives.append("%json " + json.dumps(schema))
        # in parallel, at most one call per function: a small model would otherwise repeat calls to max_tokens
        most = len(self.functions) if self.parallel and not isinstance(self.choice, dict) else 1
        calls = " | ".join(' "\\n" '.join(["call"] * count) for count in range(1, most + 1))
        return f'start: {calls}\ncall: "{OPEN}" body "{CLOSE}"\nbody: ' + " | ".join(alternatives)


def tool_call_text(name: str, arguments: dict) -> str:
    """One call as the model writes it (an assistant message's tool_calls, sent back next turn)."""
    return f"{OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CLOSE}"


def render_tools_prompt(tools: list[dict]) -> str:
    return GENERIC_PROMPT.format(tools="\n".join(json.dumps(t["function"]) for t in tools))


def parse_tool_calls(text: str, request: ToolRequest) -> tuple[str | None, list[ToolCall]]:
    """(the content outside calls or None, the calls) from a reply; a block that is not a call to
    one of the request's functions stays content."""
    names = {f["name"] for f in request.functions}
    calls, content = [], text
    for match in CALL.finditer(text):
        try:
            call = json.loads(match.group(1))
        except ValueError:
            continue
        if not isinstance(call, dict) or call.get("name") not in names or not isinstance(call.get("arguments", {}), dict):
            continue
        calls.append(ToolCall(call["name"], json.dumps(call.get("arguments", {}))))
        content = content.replace(match.group(0), "", 1)
    if not calls:
        return text, []
    content = content.strip()
    return (content or None), calls


def held_back(text: str) -> int:
    """How many trailing characters of streamed text might begin "<tool_call>" (kept until known)."""
    for n in range(min(len(text), len(OPEN) - 1), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0
