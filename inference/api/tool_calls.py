"""Tool calling for /v1/chat/completions: the tools put into the prompt, the calls read back out.

The request's tools reach the model through its chat template when the template has a tools
section (it receives `tools=`), else through a generic system prompt (below) that describes the
functions and asks for the served model's own call format. The format, and so how calls are
written, read and forced, is the model family's parser (api/tool_parsers.py). `tool_choice`
"required" or a named function forces that format with a grammar built from the functions'
parameter schemas (engine/structured.py, kind "lark"); "auto" lets the model choose and the
reply is parsed; "none" leaves the tools out.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from .tool_parsers import HermesToolParser, ToolParser

GENERIC_PROMPT = """You can call functions. The available functions, as JSON schemas:
{tools}
{instructions} Otherwise answer normally."""


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
    parser: ToolParser = field(default_factory=HermesToolParser)  # the served model's format

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def functions(self) -> list[dict]:
        named = self.choice["function"]["name"] if isinstance(self.choice, dict) else None
        return [t["function"] for t in self.tools if named is None or t["function"]["name"] == named]

    def grammar(self) -> str | None:
        """Lark forcing one call (or several, with parallel_tool_calls) to the allowed functions in
        the parser's format, or None for "auto"."""
        if not self.active or self.choice == "auto":
            return None
        # in parallel, at most as many calls as functions: a small model would otherwise repeat calls to max_tokens
        most = len(self.functions) if self.parallel and not isinstance(self.choice, dict) else 1
        return self.parser.grammar(self.functions, most)

    def read_calls(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """A finished choice's (content, calls): the request path calls this (serving's ToolReader)."""
        return parse_tool_calls(text, self)


def render_tools_prompt(tools: list[dict], parser: ToolParser) -> str:
    return GENERIC_PROMPT.format(tools="\n".join(json.dumps(t["function"]) for t in tools), instructions=parser.instructions)


def parse_tool_calls(text: str, request: ToolRequest) -> tuple[str | None, list[ToolCall]]:
    """(the content outside calls or None, the calls) from a reply; a block that is not a call to
    one of the request's functions stays content."""
    content, calls = request.parser.parse(text, {f["name"]: f.get("parameters") for f in request.functions})
    return content, [ToolCall(name, json.dumps(arguments)) for name, arguments in calls]
