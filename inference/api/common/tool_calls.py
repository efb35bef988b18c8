"""Tool calling for /v1/chat/completions: the tools put into the prompt, the calls read back out.

The request's tools reach the model through its chat template when the template has a tools
section (it receives `tools=`), else through a generic system prompt (below) that describes the
functions and asks for the served model's own call format. The format, and so how calls are
written, read and forced, is the model family's parser (api/common/tool_parsers.py). `tool_choice`
"required" or a named function forces that format with a grammar built from the functions'
parameter schemas (engine/sample/structured.py, kind "lark"); "auto" lets the model choose and the
reply is parsed; "none" leaves the tools out.

Under "auto" with MINIVLLM_TOOL_CALL_GRAMMAR on (the default), a reply that opens a call (the
family's tag anywhere, or a bare `{` / ```json fence at the start of the answer, where the family's
models write bare calls) is constrained from there to a valid call of an offered function
(`ToolRequest.trigger`, engine/sample/tool_trigger.py); a reply that opens with prose stays free.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from django.conf import settings

from .errors import bad_request
from .sampling_fields import expect
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

    def trigger(self) -> dict | None:
        """For "auto" (with MINIVLLM_TOOL_CALL_GRAMMAR on): SamplingParams.tool_trigger, the grammar
        a reply that opens a call by itself is held to from there, and what opens one; else None.
        Parameters nested past what the grammar builder recurses through leave the reply free."""
        if not self.active or self.choice != "auto" or not settings.MINIVLLM_TOOL_CALL_GRAMMAR:
            return None
        most = len(self.functions) if self.parallel else 1
        try:
            grammar = self.parser.trigger_grammar(self.functions, most)
        except RecursionError:
            return None
        return {
            "grammar": {"kind": "lark", "value": grammar, "param": "tools"},
            "tags": list(self.parser.tags),
            "bare": self.parser.bare_start,
        }

    def read_calls(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """A finished choice's (content, calls): the request path calls this (serving's ToolReader)."""
        return parse_tool_calls(text, self)


def tool_trigger(tools: ToolRequest | None, structured: dict | None) -> dict | None:
    """The request's SamplingParams.tool_trigger: tools under "auto" and no other constraint."""
    return tools.trigger() if tools is not None and structured is None else None


def active_tools(request: ToolRequest | None) -> ToolRequest | None:
    """The request's tools when they are in play (given, and tool_choice is not "none")."""
    return request if request is not None and request.active else None


def render_tools_prompt(tools: list[dict], parser: ToolParser) -> str:
    return GENERIC_PROMPT.format(tools="\n".join(json.dumps(t["function"]) for t in tools), instructions=parser.instructions)


def parse_tool_calls(text: str, request: ToolRequest) -> tuple[str | None, list[ToolCall]]:
    """(the content outside calls or None, the calls) from a reply; a block that is not a call to
    one of the request's functions stays content."""
    content, calls = request.parser.parse(text, {f["name"]: f.get("parameters") for f in request.functions})
    return content, [ToolCall(name, json.dumps(arguments)) for name, arguments in calls]


def tools_from_body(body: dict, parser: ToolParser) -> ToolRequest | None:
    """tools, tool_choice and parallel_tool_calls, as OpenAI defines them."""
    tools = expect(body, "tools", list, "a list of tools")
    choice = body.get("tool_choice", "auto" if tools else "none")
    parallel = expect(body, "parallel_tool_calls", bool, "a boolean")
    if not tools:
        if choice not in ("none", "auto"):
            raise bad_request("tool_choice needs tools", param="tool_choice")
        return None
    names = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise bad_request("each tool must be {type: function, function: {name, parameters}}", param=f"tools[{index}]")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_request("a function's parameters must be a JSON schema object", param=f"tools[{index}].function.parameters")
        names.append(name)
    if isinstance(choice, dict):
        named = choice.get("function", {}).get("name") if isinstance(choice.get("function"), dict) else None
        if choice.get("type") != "function" or named not in names:
            raise bad_request("tool_choice must name one of the tools", param="tool_choice")
    elif choice not in ("none", "auto", "required"):
        raise bad_request("tool_choice must be none, auto, required or {type: function, function: {name}}", param="tool_choice")
    return ToolRequest(
        [{"type": "function", "function": t["function"]} for t in tools],
        choice,
        True if parallel is None else parallel,
        parser,
    )
