"""Tool-call formats, one per model family: how the family's models write a call, how a reply is
read back into calls, what a stream may show before it knows, and the grammar that forces the
format when tool_choice is "required" or names a function.

A chat model is trained to one format. SmolLM2, Qwen2 / 2.5 / 3 and Hermes write
`<tool_call>{"name", "arguments"}</tool_call>`; Llama 3.1 to 3.3 write bare JSON objects
`{"name", "parameters"}`, after `<|python_tag|>` or alone, `;` between several; Qwen3.5 and
Qwen3-Coder write Qwen3-Coder's XML function blocks (api/common/xml_tool_calls.py) and Gemma 4 its
own notation (api/common/gemma4_tool_calls.py), both typed by the function's parameter schema. The
served model's format is chosen from its chat template (`tool_parser_for`), or named with
MINIVLLM_TOOL_CALL_PARSER as vLLM's --tool-call-parser names it. Adding a family is one class
here, one PARSERS line and its name in settings.TOOL_CALL_PARSERS (a test holds the two equal).

Where a family's tags are single added tokens of the served tokenizer (Qwen2.5's `<tool_call>`),
the grammars write each tag as that token (`bind` learns them): llguidance reads added tokens as
special, so the tag spelled as text would be written character by character, or not at all.

With tool_choice "auto" (and MINIVLLM_TOOL_CALL_GRAMMAR on) the reply is free until it opens a
call (engine/sample/tool_trigger.py): one of the family's `tags` anywhere, or, for families whose
models write bare calls (`bare_start`), a JSON object or a ```json fence at the start of the
answer. From there `trigger_grammar` constrains it: the tagged calls, a bare call object or a
fenced one (the shapes the near-miss readers, near_miss_calls.py, accept), then the end of the turn.

Small models miss their format in a handful of ways: a fenced ```json block, a bare JSON object,
a list of calls, `parameters` for `arguments`, a `<tool_call>` never closed. Every parser reads
these near misses too (`near_miss_calls.py`), but only where the reply, or its tail after some text,
is exactly such a call to an offered function whose arguments validate against its parameters;
anything else (ordinary JSON, another function, arguments that do not fit) stays content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import ClassVar

from django.conf import settings

from ...engine.sample.json_schemas import grammar_schema
from . import gemma4_tool_calls, xml_tool_calls
from .near_miss_calls import (
    Call,
    Functions,
    before_blanks,
    call_object,
    call_value,
    exact_calls,
    held_split,
    near_miss_calls,
    near_miss_start,
    tail_that_may_begin,
)

# JSON as the grammars write it: compact where a call is forced (no padding forever), and for a call
# a reply opened by itself the few blanks models put between tokens (`{"name": "f", ...}` or indented).
COMPACT = {"whitespace_flexible": False}
TRIGGER_STYLE = {"whitespace_flexible": True, "whitespace_pattern": "[ \\t\\n]{0,8}"}


class _AnyFunction(Mapping):
    """Every name, none with a schema: an earlier turn's calls, read back as they were written."""

    def __getitem__(self, name):
        if not isinstance(name, str):
            raise KeyError(name)
        return None

    def __contains__(self, name) -> bool:
        return isinstance(name, str)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


ANY_FUNCTION: Functions = _AnyFunction()


class ToolParser:
    """One family's format. Subclasses say how a call is written, read and forced."""

    name: ClassVar[str]
    separator: ClassVar[str] = "\n"  # between calls, as the model writes several
    # How to call, for the generic system prompt of templates without a tools section.
    instructions: ClassVar[str]
    tags: ClassVar[tuple[str, ...]] = ()  # what opens a call anywhere in a reply
    markers: ClassVar[tuple[str, ...]] = ()  # every tag the grammars write (closing ones too)
    bare_start: ClassVar[bool] = False  # its models also write a call as a bare JSON object
    # Its templates write an earlier turn's calls from `tool_calls` exactly as call_text does: a
    # template that renders `tool_calls` is given them as objects (chat_template.with_call_objects).
    template_calls: ClassVar[bool] = False

    def __init__(self):
        self.special: dict[str, int] = {}  # marker -> its token id, where it is one added token

    def bind(self, tokenizer) -> ToolParser:
        """Learns which of its markers the served tokenizer holds as added tokens (a lookup, no
        tokenizing: this runs on the event loop): the grammars write those as the token (`literal`)."""
        added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
        self.special = {marker: added[marker] for marker in self.markers if marker in added}
        return self

    def literal(self, text: str) -> str:
        """`text` in a grammar: its token (llguidance's `<[id]>`) when it is one added token, else the text."""
        return f"<[{self.special[text]}]>" if text in self.special else json.dumps(text)

    def call_text(self, name: str, arguments: dict) -> str:
        raise NotImplementedError

    def calls_text(self, calls: list[Call]) -> str:
        """An assistant turn's calls as the model writes them (sent back in the next turn)."""
        return self.separator.join(self.call_text(name, arguments) for name, arguments in calls)

    def call_rule(self, bodies: list[str]) -> str:
        """The Lark rule `call`, given the alternatives for a call's JSON object."""
        raise NotImplementedError

    def call_rules(self, functions: list[dict], style: dict = COMPACT) -> str:
        """The Lark rule `call` (and the rules it uses): one call to one of `functions`. JSON
        formats: the call's object, each function's as %json of its call_schema, in `style`."""
        bodies = []
        for function in functions:
            schema = {**self.call_schema(function), "x-guidance": style}
            bodies.append("%json " + json.dumps(schema))
        return self.call_rule(bodies)

    def call_schema(self, function: dict) -> dict:
        """The JSON schema of one call to `function` in this format."""
        raise NotImplementedError

    def parse(self, text: str, functions: Functions) -> tuple[str | None, list[Call]]:
        """(content outside the calls or None, the calls to offered functions) from a whole reply:
        the format's own calls, else a near miss (module docstring)."""
        content, calls = self.parse_format(text, functions)
        if calls:
            return content, calls
        return near_miss_calls(text, functions) or (text, [])

    def parse_format(self, text: str, functions: Functions) -> tuple[str | None, list[Call]]:
        """The calls written exactly in this format."""
        raise NotImplementedError

    def split(self, text: str, shown: int = 0) -> tuple[int, bool]:
        """For a stream: (how many leading characters of the reply so far are surely content,
        whether a call has surely begun), given that its first `shown` characters were content.
        What follows is held back: until the reply ends once a call has begun, else until the
        next delta shows it is content."""
        raise NotImplementedError

    def grammar(self, functions: list[dict], most: int) -> str:
        """Lark forcing between one and `most` calls, each to one of `functions` with arguments that
        fit its parameter schema (llguidance's %json embeds each schema)."""
        return "start: calls\n" + self._rules(functions, most)

    def trigger_grammar(self, functions: list[dict], most: int, *, other: bool = True) -> str:
        """Lark for a reply that opened a call by itself (tool_choice "auto"): blanks, then the
        calls as `grammar` forces them, or (bare_start) one bare call object or a ```json fence
        holding one, nothing after them but the end of the turn; and (`other`, bare_start) any
        other JSON value, bare or fenced, so that a `{` or a fence the model meant as an answer
        is not made a call: the engine follows the calls alone beside it (`other` False) and
        leaves the reply free once they no longer fit (engine/sample/tool_trigger.py). Call
        objects take the blanks models write between their tokens (a few, so none pads forever)."""
        starts = self.trigger_starts()
        fence = FENCED_RULE if "fenced" in starts else ""  # only the JSON formats have a `body` to fence
        answers = OTHER_JSON_RULES if other and self.bare_start else ""
        if answers:
            starts = [*starts, "other_json", "other_fenced"]
        head = f"start: LEAD? ({' | '.join(starts)})\n"
        return head + self._rules(functions, most, TRIGGER_STYLE) + fence + answers + LEAD_RULE

    def trigger_starts(self) -> list[str]:
        """The alternatives a reply that opened a call by itself may take (rules of `_rules`)."""
        return ["calls", "body", "fenced"] if self.bare_start else ["calls"]

    def _rules(self, functions: list[dict], most: int, style: dict = COMPACT) -> str:
        between = f" {json.dumps(self.separator)} " if self.separator else " "
        calls = " | ".join(between.join(["call"] * count) for count in range(1, most + 1))
        return f"calls: {calls}\n{self.call_rules(functions, style)}\n"


# The rules trigger_grammar adds: blanks before the call, and a fenced call (its body as the call's).
FENCED_RULE = 'fenced: "```json" "\\n"? body "\\n"? "```"\n'
LEAD_RULE = "LEAD: /[ \\t\\r\\n]{1,8}/\n"
# JSON answers (trigger_grammar): an object (what a bare `{` opens) or, in a ```json fence, any JSON
# value; then anything.
OTHER_JSON_RULES = r"""other_json: %json {"type": "object", "x-guidance": {"whitespace_flexible": true, "whitespace_pattern": "[ \\t\\n]{0,8}"}}
other_fenced: "```json" /[ \t\r\n]*/ %json {"x-guidance": {"whitespace_flexible": true, "whitespace_pattern": "[ \\t\\n]{0,8}"}} /[\s\S]*/
"""


def _object_schema(function: dict, arguments_key: str) -> dict:
    parameters = dict(function.get("parameters") or {"type": "object"})
    # the parameters' definitions move to the call's root, where their "#/$defs/..." refs now point
    # (unless the parameters are a resource of their own, with an $id their refs resolve against)
    movable = "$id" not in parameters
    definitions = {
        key: parameters.pop(key) for key in ("$defs", "definitions") if movable and isinstance(parameters.get(key), dict)
    }
    return grammar_schema(
        {
            "type": "object",
            "properties": {"name": {"const": function["name"]}, arguments_key: parameters},
            "required": ["name", arguments_key],
            "additionalProperties": False,
            **definitions,
        }
    )


class HermesToolParser(ToolParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one per line (SmolLM2, Qwen, Hermes)."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    tags, markers, bare_start = (OPEN,), (OPEN, CLOSE), True
    CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)
    instructions = (
        "To call one or more of them, reply with one line per call, each exactly\n"
        '<tool_call>{"name": <function name>, "arguments": <arguments as a JSON object>}</tool_call>\n'
        "and nothing else."
    )

    def call_text(self, name: str, arguments: dict) -> str:
        return f"{self.OPEN}{json.dumps({'name': name, 'arguments': arguments})}{self.CLOSE}"

    def call_schema(self, function: dict) -> dict:
        return _object_schema(function, "arguments")

    def call_rule(self, bodies: list[str]) -> str:
        # the body may sit on its own line, as Qwen's template writes it: <tool_call>\n{...}\n</tool_call>
        return f'call: {self.literal(self.OPEN)} "\\n"? body "\\n"? {self.literal(self.CLOSE)}\nbody: ' + " | ".join(bodies)

    def parse_format(self, text: str, functions: Functions) -> tuple[str | None, list[Call]]:
        calls, content = [], text
        for block, inside in self._blocks(text):
            call = call_object(inside, functions, "arguments")
            if call is not None:
                calls.append(call)
                content = content.replace(block, "", 1)
        last = content.rfind(self.OPEN)
        if last != -1 and self.CLOSE not in content[last:]:  # a call never closed, at the end of the reply
            unclosed = exact_calls(content[last + len(self.OPEN) :], functions)
            if unclosed:
                calls, content = calls + unclosed, content[:last]
        if not calls:
            return text, []
        return content.strip() or None, calls

    def _blocks(self, text: str):
        """Each `<tool_call>...</tool_call>` block and the text inside it. The inside is read as
        JSON first, so a closing tag within one of its strings (a forced call's argument may hold
        one) does not end it; where it is not JSON, it ends at the first closing tag."""
        decoder, at = json.JSONDecoder(), text.find(self.OPEN)
        while at != -1:
            start = at + len(self.OPEN)
            body = start + len(text[start:]) - len(text[start:].lstrip())
            try:
                _, end = decoder.raw_decode(text, body)
            except (ValueError, RecursionError):
                end = None
            after = end + len(text[end:]) - len(text[end:].lstrip()) if end is not None else None
            if after is not None and text.startswith(self.CLOSE, after):
                block_end = after + len(self.CLOSE)
                yield text[at:block_end], text[body:end]
            else:
                match = self.CALL.match(text, at)
                if match is None:
                    return
                block_end = match.end()
                yield match.group(0), match.group(1)
            at = text.find(self.OPEN, block_end)

    def split(self, text: str, shown: int = 0) -> tuple[int, bool]:
        at = text.find(self.OPEN, shown)  # what was shown holds no start of a call: search on from there
        if at != -1:
            return before_blanks(text, at, shown), True
        held = near_miss_start(text, shown)
        return min(held, before_blanks(text, len(text) - tail_that_may_begin(text, self.OPEN), shown)), False


class Llama3JsonToolParser(ToolParser):
    """Llama 3.1-3.3's JSON calls: the reply is `{"name": ..., "parameters": {...}}` (optionally
    after `<|python_tag|>`), several separated by `;`. A reply that starts otherwise is content."""

    name = "llama3_json"
    TAG = "<|python_tag|>"
    separator = "; "
    tags, markers, bare_start = (TAG,), (TAG,), True
    instructions = (
        "To call one or more of them, reply with only the calls, each a JSON object\n"
        '{"name": <function name>, "parameters": <arguments as a JSON object>}\n'
        "separated by '; ', and nothing else."
    )

    def call_text(self, name: str, arguments: dict) -> str:
        return json.dumps({"name": name, "parameters": arguments})

    def call_schema(self, function: dict) -> dict:
        return _object_schema(function, "parameters")

    def call_rule(self, bodies: list[str]) -> str:
        return "call: body\nbody: " + " | ".join(bodies)

    def trigger_starts(self) -> list[str]:
        return [f"{self.literal(self.TAG)} LEAD? calls", "calls", "fenced"]

    def parse_format(self, text: str, functions: Functions) -> tuple[str | None, list[Call]]:
        rest = text.strip()
        if rest.startswith(self.TAG):
            rest = rest[len(self.TAG) :].lstrip()
        if not rest.startswith("{"):
            return text, []
        decoder, calls = json.JSONDecoder(), []
        while rest:
            try:
                value, end = decoder.raw_decode(rest)
            except (ValueError, RecursionError):
                return text, []  # not wholly calls: the reply is content, as vLLM reads it
            call = call_value(value, functions, ("parameters",))
            if call is None:
                return text, []
            calls.append(call)
            rest = rest[end:].lstrip().removeprefix(";").lstrip()
        return None, calls

    def split(self, text: str, shown: int = 0) -> tuple[int, bool]:
        if not shown:
            start = text.lstrip()
            if not start:
                return 0, False  # leading blanks wait: a call may follow them
            if start.startswith("{") or start.startswith(self.TAG):
                return 0, True  # its own format, one call or several: held to the end
            if self.TAG.startswith(start):
                return 0, False
        return near_miss_start(text, shown), False


class Qwen3CoderToolParser(ToolParser):
    """Qwen3-Coder's XML function blocks in `<tool_call>` tags (Qwen3.5, Qwen3-Coder; vLLM's
    qwen3_coder): values typed by the parameter schema (api/common/xml_tool_calls.py)."""

    name = "qwen3_coder"
    tags = (xml_tool_calls.OPEN, xml_tool_calls.FUNCTION)  # a function block written without its tags opens a call too
    markers = (xml_tool_calls.OPEN, xml_tool_calls.CLOSE)
    template_calls = True
    instructions = (
        "To call one or more of them, reply with one block per call, each exactly\n"
        "<tool_call>\n<function=FUNCTION NAME>\n<parameter=ARGUMENT NAME>\nVALUE\n</parameter>\n</function>\n</tool_call>\n"
        "with one parameter block per argument, and nothing else."
    )

    def call_text(self, name: str, arguments: dict) -> str:
        return xml_tool_calls.call_text(name, arguments)

    def call_rules(self, functions: list[dict], style: dict = COMPACT) -> str:
        return xml_tool_calls.rules(functions, self.literal)

    def trigger_starts(self) -> list[str]:
        return ["calls", "function"]  # `function`: one block opened without the <tool_call> tag

    def parse_format(self, text: str, functions: Functions) -> tuple[str | None, list[Call]]:
        return xml_tool_calls.read(text, functions, lambda inside: exact_calls(inside, functions))

    def split(self, text: str, shown: int = 0) -> tuple[int, bool]:
        return held_split(text, shown, self.tags)


class Gemma4ToolParser(ToolParser):
    """Gemma 4's `<|tool_call>call:NAME{key:value,...}<tool_call|>`, calls one after another
    (api/common/gemma4_tool_calls.py)."""

    name = "gemma4"
    separator = ""
    tags = (gemma4_tool_calls.OPEN,)
    markers = (gemma4_tool_calls.OPEN, gemma4_tool_calls.CLOSE, gemma4_tool_calls.QUOTE)
    template_calls = True
    instructions = (
        "To call one or more of them, reply with only the calls, each exactly\n"
        "<|tool_call>call:FUNCTION NAME{ARGUMENT NAME:VALUE,...}<tool_call|>\n"
        'with each string value between <|"|> marks, and nothing else.'
    )

    def call_text(self, name: str, arguments: dict) -> str:
        return gemma4_tool_calls.call_text(name, arguments)

    def call_rules(self, functions: list[dict], style: dict = COMPACT) -> str:
        return gemma4_tool_calls.rules(functions, self.literal)

    def parse_format(self, text: str, functions: Functions) -> tuple[str | None, list[Call]]:
        return gemma4_tool_calls.read(text, functions)

    def split(self, text: str, shown: int = 0) -> tuple[int, bool]:
        return held_split(text, shown, self.tags)


PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser for parser in (HermesToolParser, Llama3JsonToolParser, Qwen3CoderToolParser, Gemma4ToolParser)
}


# What a Llama 3 template says: 3.1 and 3.3 name the python tag; 3.2's lightweight models only ask
# for {"name", "parameters"} objects.
LLAMA3_MARKERS = (Llama3JsonToolParser.TAG, '"parameters": dictionary of argument name')


def parser_for_template(template: str | None) -> ToolParser:
    """The format a chat template teaches its model: Gemma 4's notation or Qwen3-Coder's XML
    function blocks where it writes them, Llama 3's JSON where it speaks of it, else the
    `<tool_call>` tags of SmolLM2, Qwen and Hermes (and of our generic prompt)."""
    text = str(template or "")  # str: some tokenizers keep a dict of named templates
    if gemma4_tool_calls.OPEN in text:
        return Gemma4ToolParser()
    if xml_tool_calls.FUNCTION in text:
        return Qwen3CoderToolParser()
    if any(marker in text for marker in LLAMA3_MARKERS):
        return Llama3JsonToolParser()
    return HermesToolParser()


def tool_parser_for(tokenizer) -> ToolParser:
    """The served model's parser: MINIVLLM_TOOL_CALL_PARSER when it names one, else its template's."""
    named = settings.MINIVLLM_TOOL_CALL_PARSER
    if named != "auto":
        parser = PARSERS[named]()
    else:
        parser = parser_for_template(getattr(tokenizer, "chat_template", None) if tokenizer is not None else None)
    return parser.bind(tokenizer) if tokenizer is not None else parser
