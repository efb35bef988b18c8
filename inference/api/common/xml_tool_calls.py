"""Qwen3-Coder's XML function-call form, the one Qwen3.5's and Qwen3-Coder's chat templates teach:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A value is text, not JSON: the template writes a string as it is, an object or a list as JSON
(`tojson`) and anything else through Jinja's `string` (Python's `True`, `2`, `None`). Reading a call
back therefore needs the function's parameter schema: each value becomes the type the schema gives
it (integer, number, boolean, null, object, array), as vLLM's qwen3_coder parser reads them; a
value of a parameter the schema does not type, or that does not read as its type, stays the string
it is. `call_text` writes a call byte for byte as the template does, so a call sent back in a later
turn is the prompt the template itself makes of it.

The grammar (`rules`) holds a call's function to the offered ones and its parameters to the
function's properties, in the schema's order (required ones always, the others optionally). A typed
value is held to its type (an enum to its values, a boolean to either spelling, a number, object or
list to its schema as `%json`, spaced as `tojson` writes JSON); any other value is free text up to
the line that closes the parameter (within a string's minLength / maxLength).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Mapping

from ...engine.sample.json_schemas import grammar_schema
from .tool_value_types import enum_values, properties, repeat, resolve, string_length, type_of, value_types

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"

Call = tuple[str, dict]

# a block never closed runs to the end of the reply (a reply cut by max_tokens, or a model that stops early)
BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.S)
FUNCTION_BLOCK = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.S)
PARAMETER_BLOCK = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|\Z)", re.S)
INTEGER = re.compile(r"-?\d+")
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
MAX_DIGITS = 4000  # Python refuses to convert longer digit strings (sys.int_info): such a value stays text

# JSON inside a value as the template's `tojson` spaces it (Python's json.dumps), never padded
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
CLOSING = json.dumps(f"\n{PARAMETER_END}\n")
SHARED_RULES = (
    # free text, lazily: it ends at the first line that closes the parameter
    "text_value[lazy]: /(?s:.*)\\n<\\/parameter>\\n/\n"
    'any_parameter: "<parameter=" PARAMETER_NAME ">\\n" text_value\n'
    "PARAMETER_NAME: /[^>\\n]+/\n"
    "BOOLEAN: /true|false|True|False/\n"
    "NULL: /null|None/\n"
)


def value_text(value) -> str:
    """A value as the template writes it: objects and lists as `tojson`, anything else as Jinja's `string`."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)


def call_text(name: str, arguments: dict) -> str:
    """One call, exactly as the template writes an assistant turn's `tool_calls`."""
    written = "".join(f"{PARAMETER}{key}>\n{value_text(value)}\n{PARAMETER_END}\n" for key, value in arguments.items())
    return f"{OPEN}\n{FUNCTION}{name}>\n{written}{FUNCTION_END}\n{CLOSE}"


def read(text: str, functions: Mapping[str, dict | None], near_miss: Callable[[str], list[Call]]):
    """(the text outside the calls, trimmed, or None; the calls to offered functions in the order
    written): `<tool_call>` blocks, a block never closed at the end, and `<function=...>` blocks
    written without the wrapper. A block holding another shape is given to `near_miss` (a JSON call
    in the tags); one that names no offered function stays in the text."""
    found: list[tuple[int, int, list[Call]]] = []
    blocks = list(BLOCK.finditer(text))
    for block in blocks:
        calls = [call for function in FUNCTION_BLOCK.finditer(block.group(1)) if (call := _call(function, functions))]
        if not calls and FUNCTION not in block.group(1):
            calls = near_miss(block.group(1))
        if calls:
            found.append((block.start(), block.end(), calls))
    for function in FUNCTION_BLOCK.finditer(text):
        if not any(block.start() <= function.start() < block.end() for block in blocks):
            call = _call(function, functions)
            if call is not None:
                found.append((function.start(), function.end(), [call]))
    if not found:
        return text, []
    found.sort(key=lambda item: item[0])
    pieces, at = [], 0
    for start, end, _ in found:
        pieces.append(text[at:start])
        at = end
    pieces.append(text[at:])
    return "".join(pieces).strip() or None, [call for *_, calls in found for call in calls]


def _call(function: re.Match, functions: Mapping[str, dict | None]) -> Call | None:
    name = function.group(1).strip()
    if name not in functions:
        return None
    parameters = functions[name]
    named = properties(parameters)
    arguments = {}
    for parameter in PARAMETER_BLOCK.finditer(function.group(2)):
        key = parameter.group(1).strip()
        schema = named[0].get(key) if named is not None else None
        arguments[key] = read_value(parameter.group(2), schema, parameters)
    return name, arguments


def read_value(text: str, schema, root) -> object:
    """A parameter's text as the type its schema gives it (non-string types tried first, in the
    schema's order); the text itself where the schema does not type it or it reads as none of them."""
    types = value_types(schema, root)
    word = text.strip()
    if "null" in types and word.lower() in ("null", "none"):
        return None
    for kind in [kind for kind in types if kind != "string"]:
        if kind == "boolean" and word.lower() in ("true", "false"):
            return word.lower() == "true"
        if kind in ("integer", "number") and INTEGER.fullmatch(word) and len(word) <= MAX_DIGITS:
            return int(word)
        if kind == "number" and NUMBER.fullmatch(word) and len(word) <= MAX_DIGITS:
            return _finite(float(word), word)
        if kind in ("object", "array"):
            value = _structure(word)
            if value is not None and type_of(value) == kind:
                return value
    return text


def _finite(number: float, word: str):
    return number if math.isfinite(number) else word


def _structure(word: str):
    """An object or a list written as JSON, or as Python writes one (single quotes, True); else None."""
    try:
        return json.loads(word)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(word)  # literals only: nothing is run
    except Exception:
        return None


def rules(functions: list[dict], literal: Callable[[str], str]) -> str:
    """The Lark rules `call` (one call in its `<tool_call>` block) and `function` (a function block
    alone) for calls to `functions`; `literal` writes a tag (as its token where it is one)."""
    lines = [
        f'call: {literal(OPEN)} "\\n" function "\\n" {literal(CLOSE)}',
        "function: " + " | ".join(f"f{index}" for index in range(len(functions))),
    ]
    for index, function in enumerate(functions):
        lines += _function_rules(f"f{index}", function)
    return "\n".join(lines) + "\n" + SHARED_RULES


def _function_rules(rule: str, function: dict) -> list[str]:
    parameters = function.get("parameters")
    head, end = json.dumps(f"{FUNCTION}{function['name']}>\n"), json.dumps(FUNCTION_END)
    named = properties(parameters)
    if named is None:
        return [f"{rule}: {head} any_parameter* {end}"]
    lines, items = [], []
    for index, (name, schema) in enumerate(named[0].items()):
        value = f"{rule}_{index}_value"
        lines += _value_rules(value, schema, parameters)
        lines.append(f"{rule}_{index}: {json.dumps(f'{PARAMETER}{name}>' + chr(10))} {value}")
        items.append(f"{rule}_{index}" + ("" if name in named[1] else "?"))
    return [*lines, f"{rule}: {head} {' '.join(items)} {end}"]


def _value_rules(rule: str, schema, root) -> list[str]:
    """The rule `rule`: one parameter's value and the line that closes it."""
    choices = enum_values(schema, root)
    if choices is not None and not any(isinstance(choice, (dict, list)) for choice in choices):
        spellings = []
        for choice in choices:
            spellings += [value_text(choice)] + ([value_text(choice).lower()] if isinstance(choice, bool) else [])
        return [f"{rule}: ({' | '.join(json.dumps(text) for text in dict.fromkeys(spellings))}) {CLOSING}"]
    types = value_types(schema, root)
    if not types or "string" in types:
        length = string_length(schema, root) if types == ["string"] else None
        if length is None:
            return [f"{rule}: text_value"]
        return [f"{rule}[lazy]: /(?s:.{repeat(*length)})\\n<\\/parameter>\\n/"]
    lines, alternatives = [], []
    if "boolean" in types:
        alternatives.append("BOOLEAN")
    if "null" in types:
        alternatives.append("NULL")
    structured = [kind for kind in types if kind in ("integer", "number", "object", "array")]
    if structured:
        lines.append(f"{rule}_json: %json {json.dumps(embedded_schema(schema, root, structured))}")
        alternatives.append(f"{rule}_json")
    return [*lines, f"{rule}: ({' | '.join(alternatives)}) {CLOSING}"]


def embedded_schema(schema, root, types: list[str]) -> dict:
    """A parameter's schema for `%json`: only its JSON types, with the parameters' own definitions
    beside it (where its refs point), written as the template spaces JSON."""
    embedded = {**resolve(schema, root), "type": types if len(types) > 1 else types[0]}
    if isinstance(root, dict):
        for key in ("$defs", "definitions"):
            if isinstance(root.get(key), dict) and key not in embedded:
                embedded[key] = root[key]
    return {**grammar_schema(embedded), "x-guidance": JSON_STYLE}
