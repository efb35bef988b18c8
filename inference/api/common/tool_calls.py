"""Tool calling for /v1/chat/completions: the tools put into the prompt, the calls read back out.

The request's tools reach the model through its chat template when the template has a tools
section (it receives `tools=`), else through a generic system prompt (below) that describes the
functions and asks for the served model's own call format. The format, and so how calls are
written, read and forced, is the model family's parser (api/common/tool_parsers.py). `tool_choice`
"required" or a named function forces that format with a grammar built from the functions'
parameter schemas (engine/sample/structured.py, kind "lark"); "auto" lets the model choose and the
reply is parsed; "none" still shows the model the tools (as vLLM and OpenAI do) but its reply is
never read for calls. `allowed_tools` (a tool_choice form) narrows which of the tools may be called
while every tool stays in the prompt; `max_calls` (Responses' `max_tool_calls`) caps the calls one
reply makes, as `parallel_tool_calls: false` caps them at one: a call past the cap is dropped.
A function with `strict: true` is held to its schema as OpenAI's strict mode holds it (`strict_schema`):
every object closed (`additionalProperties: false`) with all its properties required.

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
# tool_choice "none": the functions are shown, and the reply must not call them
NO_CALLS_PROMPT = """These functions exist, as JSON schemas:
{tools}
Do not call any of them in this reply: answer in text."""


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

    tools: list[dict]  # each {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}
    choice: str | dict = "auto"  # none | auto | required | {"type": "function", "function": {"name"}}
    parallel: bool = True
    parser: ToolParser = field(default_factory=HermesToolParser)  # the served model's format
    allowed: frozenset[str] | None = None  # allowed_tools: the functions that may be called (None: all)
    max_calls: int | None = None  # the most calls one reply makes (Responses' max_tool_calls)
    strict: dict[str, dict] = field(default_factory=dict)  # name -> the strict parameters of a `strict: true` function

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none" and self.max_calls != 0

    @property
    def functions(self) -> list[dict]:
        """The functions a reply may call (a named choice's, allowed_tools'), strict ones with their strict parameters."""
        named = self.choice["function"]["name"] if isinstance(self.choice, dict) else None
        found = []
        for tool in self.tools:
            function = tool["function"]
            if (named is None or function["name"] == named) and (self.allowed is None or function["name"] in self.allowed):
                strict = self.strict.get(function["name"])
                found.append(function if strict is None else {**function, "parameters": strict})
        return found

    @property
    def most_calls(self) -> int:
        """The most calls one reply may make: one unless parallel (and no more than the functions
        in parallel: a small model would otherwise repeat calls to max_tokens), within max_calls."""
        most = len(self.functions) if self.parallel and not isinstance(self.choice, dict) else 1
        return max(1, min(most, self.max_calls)) if self.max_calls is not None else max(1, most)

    def grammar(self) -> str | None:
        """Lark forcing one call (or several, with parallel_tool_calls) to the allowed functions in
        the parser's format, or None for "auto"."""
        if not self.active or self.choice == "auto":
            return None
        return self.parser.grammar(self.functions, self.most_calls)

    def trigger(self) -> dict | None:
        """For "auto" (with MINIVLLM_TOOL_CALL_GRAMMAR on): SamplingParams.tool_trigger, the grammar
        a reply that opens a call by itself is held to from there, and what opens one; else None.
        Parameters nested past what the grammar builder recurses through leave the reply free."""
        if not self.active or self.choice != "auto" or not settings.MINIVLLM_TOOL_CALL_GRAMMAR or not self.functions:
            return None
        try:
            grammar = self.parser.trigger_grammar(self.functions, self.most_calls)
            calls = self.parser.trigger_grammar(self.functions, self.most_calls, other=False)
        except RecursionError:
            return None
        return {
            "grammar": {"kind": "lark", "value": grammar, "param": "tools"},
            "calls": {"kind": "lark", "value": calls, "param": "tools"},  # the calls alone: whether a `{` still is one
            "tags": list(self.parser.tags),
            "bare": self.parser.bare_start,
        }

    def read_calls(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """A finished choice's (content, calls): the request path calls this (serving's ToolReader).
        Calls past parallel_tool_calls' one or max_calls are dropped (OpenAI: further calls are ignored)."""
        content, calls = parse_tool_calls(text, self)
        cap = self.max_calls if self.parallel else 1
        return content, calls if cap is None else calls[:cap]


def tool_trigger(tools: ToolRequest | None, structured: dict | None) -> dict | None:
    """The request's SamplingParams.tool_trigger: tools under "auto" and no other constraint."""
    return tools.trigger() if tools is not None and structured is None else None


def active_tools(request: ToolRequest | None) -> ToolRequest | None:
    """The request's tools when a reply may call them (given, tool_choice not "none", max_calls not 0)."""
    return request if request is not None and request.active else None


def render_tools_prompt(tools: list[dict], parser: ToolParser, *, calling: bool = True) -> str:
    """The generic prompt (templates without a tools section); `calling` False (tool_choice
    "none"): the functions described, and the reply asked not to call them."""
    described = "\n".join(json.dumps(t["function"]) for t in tools)
    if not calling:
        return NO_CALLS_PROMPT.format(tools=described)
    return GENERIC_PROMPT.format(tools=described, instructions=parser.instructions)


def results_text(results: list[dict]) -> str:
    """Tool results for a template with no `tool` role, as one user turn's text: each in the
    <tool_response> block the Hermes-format models were trained on, named by its call."""
    blocks = []
    for result in results:
        named = f" name={json.dumps(result['name'])}" if result.get("name") else ""
        blocks.append(f"<tool_response{named}>\n{result['content']}\n</tool_response>")
    return "\n".join(blocks)


def parse_tool_calls(text: str, request: ToolRequest) -> tuple[str | None, list[ToolCall]]:
    """(the content outside calls or None, the calls) from a reply; a block that is not a call to
    one of the request's functions stays content."""
    content, calls = request.parser.parse(text, {f["name"]: f.get("parameters") for f in request.functions})
    return content, [ToolCall(name, json.dumps(arguments)) for name, arguments in calls]


def _allowed_tools(choice: dict, names: list[str]) -> tuple[str, frozenset[str]]:
    """tool_choice {type: allowed_tools, allowed_tools: {mode, tools}} (chat's form): (the mode, the
    names of the functions it allows); each must be one of the request's tools."""
    spec = choice.get("allowed_tools")
    mode = spec.get("mode") if isinstance(spec, dict) else None
    listed = spec.get("tools") if isinstance(spec, dict) else None
    if mode not in ("auto", "required") or not isinstance(listed, list) or not listed:
        raise bad_request(
            "tool_choice allowed_tools needs mode (auto or required) and a non-empty list of tools", param="tool_choice"
        )
    allowed = set()
    for tool in listed:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or name not in names:
            raise bad_request("tool_choice allowed_tools may list only the request's function tools", param="tool_choice")
        allowed.add(name)
    return mode, frozenset(allowed)


# where a schema holds sub-schemas: one, a list of them, or a map of them (not / if are left as
# they are: closing an object there would turn their meaning round)
_ONE, _LISTS, _MAPS = (
    ("items", "contains"),
    ("anyOf", "oneOf", "allOf", "prefixItems", "items"),
    ("properties", "$defs", "definitions"),
)


def strict_schema(schema, param: str):
    """A `strict: true` function's parameters as OpenAI's strict mode reads them: every object
    allows no other keys and requires all its properties (an object that allows others, which
    strict mode cannot honour, is a 400 naming it)."""
    if not isinstance(schema, dict):
        return schema
    strict = dict(schema)
    types = strict.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types) or "properties" in strict
    if is_object:
        extra = strict.get("additionalProperties", False)
        if extra is not False or "patternProperties" in strict:
            raise bad_request(
                "a strict function's objects may not allow other properties: additionalProperties must be false",
                param=param,
            )
        properties = strict.get("properties")
        strict["additionalProperties"] = False
        strict["required"] = list(properties) if isinstance(properties, dict) else []
    for key in _ONE:
        if isinstance(strict.get(key), dict):
            strict[key] = strict_schema(strict[key], param)
    for key in _LISTS:
        if isinstance(strict.get(key), list):
            strict[key] = [strict_schema(item, param) for item in strict[key]]
    for key in _MAPS:
        if isinstance(strict.get(key), dict):
            strict[key] = {name: strict_schema(sub, param) for name, sub in strict[key].items()}
    return strict


def tools_from_body(body: dict, parser: ToolParser, *, max_calls: int | None = None) -> ToolRequest | None:
    """tools, tool_choice (none, auto, required, a named function, or allowed_tools) and
    parallel_tool_calls, as OpenAI defines them; `max_calls`: Responses' max_tool_calls."""
    tools = expect(body, "tools", list, "a list of tools")
    choice = body.get("tool_choice", "auto" if tools else "none")
    parallel = expect(body, "parallel_tool_calls", bool, "a boolean")
    if not tools:
        if choice not in ("none", "auto"):
            raise bad_request("tool_choice needs tools", param="tool_choice")
        return None
    names, strict = [], {}
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise bad_request("each tool must be {type: function, function: {name, parameters}}", param=f"tools[{index}]")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_request("a function's parameters must be a JSON schema object", param=f"tools[{index}].function.parameters")
        flag = function.get("strict")
        if flag is not None and not isinstance(flag, bool):
            raise bad_request("a function's strict must be a boolean", param=f"tools[{index}].function.strict")
        if flag:
            param = f"tools[{index}].function.parameters"
            strict[name] = strict_schema(parameters or {"type": "object", "properties": {}}, param)
        names.append(name)
    allowed = None
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        choice, allowed = _allowed_tools(choice, names)
    elif isinstance(choice, dict):
        named = choice.get("function", {}).get("name") if isinstance(choice.get("function"), dict) else None
        if choice.get("type") != "function" or named not in names:
            raise bad_request("tool_choice must name one of the tools", param="tool_choice")
    elif choice not in ("none", "auto", "required"):
        raise bad_request(
            "tool_choice must be none, auto, required, {type: function, function: {name}} or {type: allowed_tools, ...}",
            param="tool_choice",
        )
    if max_calls == 0 and choice not in ("none", "auto"):
        raise bad_request("a call cannot be required when max_tool_calls is 0", param="max_tool_calls")
    return ToolRequest(
        [{"type": "function", "function": t["function"]} for t in tools],
        choice,
        True if parallel is None else parallel,
        parser,
        allowed,
        max_calls,
        strict,
    )
