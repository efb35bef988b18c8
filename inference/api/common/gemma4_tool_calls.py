"""Gemma 4's function-call notation, as its chat template writes an assistant turn's calls:

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>

The arguments are neither JSON nor text: an object's keys are bare and sorted (Jinja's `dictsort`,
case aside), a string sits between `<|"|>` marks, numbers are written as Python writes them,
booleans as `true` / `false`, None as `None`; several calls follow one another with nothing between.
The template ends a calling turn with `<|tool_response>` (the tool's answer follows in the same
turn), so a reply may end with that mark after its calls.

`call_text` writes a call byte for byte as the template does; `read_value` reads the notation back
(llama.cpp's peg-gemma4 grammar is the reference: keys are any text up to `:`, strings any text up
to the next mark). The grammar (`rules`) holds a call to an offered function, its keys to the
function's properties in the template's order (required ones always, the others optionally), a
string, number, boolean, enum or null to its type, and a nested object or list to the notation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping

from ...engine.sample.json_schemas import grammar_schema
from .tool_value_types import enum_values, properties, repeat, resolve, string_length, value_types

OPEN, CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
RESPONSE = "<|tool_response>"  # what closes a calling turn in the template
MAX_DEPTH = 64  # nesting a reply may write before it is not a call

Call = tuple[str, dict]
HEAD = re.compile(re.escape(OPEN) + r"\s*call:([^{\s<]+)")
SCALAR_END = re.compile(r"[,}\]]|<\|")
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
INTEGER = re.compile(r"-?\d+")
NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def value_text(value) -> str:
    """A value as the template's format_argument writes it in a call (keys bare)."""
    if isinstance(value, str):
        return f"{QUOTE}{value}{QUOTE}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{value_text(item)}" for key, item in _sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(value_text(item) for item in value) + "]"
    return str(value)


def _sorted(mapping: dict) -> list:
    """Jinja's dictsort: by key, case ignored."""
    return sorted(mapping.items(), key=lambda item: item[0].lower() if isinstance(item[0], str) else item[0])


def call_text(name: str, arguments: dict) -> str:
    return f"{OPEN}call:{name}{value_text(arguments)}{CLOSE}"


def read(text: str, functions: Mapping[str, dict | None]) -> tuple[str | None, list[Call]]:
    """(the text outside the calls, trimmed, or None; the calls to offered functions): each
    `<|tool_call>call:NAME{...}` whose arguments read as the notation, closed by `<tool_call|>` (or
    by the end of the reply); the `<|tool_response>` that ends a calling turn is no content."""
    calls, pieces, at = [], [], 0
    for head in HEAD.finditer(text):
        if head.start() < at or head.group(1) not in functions:
            continue
        try:
            arguments, end = read_value(text, head.end())
        except (ValueError, RecursionError):
            continue
        rest = text[end:].lstrip()
        if not isinstance(arguments, dict) or not (rest.startswith(CLOSE) or not rest or rest.startswith(RESPONSE)):
            continue
        end = len(text) - len(rest) + (len(CLOSE) if rest.startswith(CLOSE) else 0)
        calls.append((head.group(1), arguments))
        pieces.append(text[at : head.start()])
        at = end
    if not calls:
        return text, []
    pieces.append(text[at:].strip().removesuffix(RESPONSE))
    return "".join(pieces).strip() or None, calls


def read_value(text: str, at: int, depth: int = 0) -> tuple[object, int]:
    """(the value written at `at`, where it ends); ValueError where the notation is broken."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    at = _blanks(text, at)
    if text.startswith(QUOTE, at):
        end = text.find(QUOTE, at + len(QUOTE))
        if end == -1:
            raise ValueError("a string never closed")
        return text[at + len(QUOTE) : end], end + len(QUOTE)
    if text.startswith("{", at):
        return _items(text, at + 1, "}", depth, keyed=True)
    if text.startswith("[", at):
        return _items(text, at + 1, "]", depth, keyed=False)
    end = SCALAR_END.search(text, at)
    end = end.start() if end else len(text)
    word = text[at:end].strip()
    if not word or any(character.isspace() for character in word):
        raise ValueError("a value is missing" if not word else "a value is two words")
    return _scalar(word), end


def _items(text: str, at: int, closer: str, depth: int, *, keyed: bool) -> tuple[object, int]:
    found: dict | list = {} if keyed else []
    at = _blanks(text, at)
    if text.startswith(closer, at):
        return found, at + 1
    while True:
        if keyed:
            key, at = _key(text, at)
            found[key], at = read_value(text, at, depth + 1)
        else:
            item, at = read_value(text, at, depth + 1)
            found.append(item)
        at = _blanks(text, at)
        if text.startswith(closer, at):
            return found, at + 1
        if not text.startswith(",", at):
            raise ValueError("a separator is missing")
        at += 1


def _key(text: str, at: int) -> tuple[str, int]:
    """An object's key and where its value starts: bare (any text up to `:`) or between marks."""
    at = _blanks(text, at)
    if text.startswith(QUOTE, at):
        key, at = read_value(text, at)
    else:
        colon = text.find(":", at)
        if colon == -1 or any(mark in text[at:colon] for mark in "{}[],"):
            raise ValueError("a key is missing")
        key, at = text[at:colon].strip(), colon
    at = _blanks(text, at)
    if not key or not text.startswith(":", at):
        raise ValueError("a key is missing its value")
    return key, at + 1


def _scalar(word: str):
    if word in ("true", "false"):
        return word == "true"
    if word in ("null", "None"):
        return None
    if INTEGER.fullmatch(word):
        return int(word)
    if NUMBER.fullmatch(word):
        number = float(word)
        return number if math.isfinite(number) else word  # (1e999: JSON has no infinity)
    return word  # a bare word: the model left out the marks (one word only: `1 2` is no value)


def _blanks(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


# The notation of a nested value the schema does not spell out (llama.cpp's gemma4 rules).
SHARED_RULES = (
    "g_value: g_string | G_NUMBER | G_BOOLEAN | G_NULL | g_object | g_list\n"
    'g_object: "{" (g_member ("," g_member)*)? "}"\n'
    'g_member: G_KEY ":" g_value\n'
    'g_list: "[" (g_value ("," g_value)*)? "]"\n'
    "G_KEY: /[^:{}\\[\\],<]+/\n"
    "G_NUMBER: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?/\n"
    "G_BOOLEAN: /true|false/\n"
    "G_NULL: /None|null/\n"
)


def rules(functions: list[dict], literal: Callable[[str], str]) -> str:
    """The Lark rule `call` (one call) for calls to `functions`; `literal` writes a mark (as its
    token where it is one: a string's text then runs up to the token, else up to the mark's text)."""
    quote = literal(QUOTE)
    lines = [
        *_string_rules("g_string", None, quote),
        f'call: {literal(OPEN)} "call:" function {literal(CLOSE)}',
        "function: " + " | ".join(f"f{index}" for index in range(len(functions))),
    ]
    for index, function in enumerate(functions):
        lines += _function_rules(f"f{index}", function, quote)
    return "\n".join(lines) + "\n" + SHARED_RULES


def _string_rules(rule: str, length: tuple[int, int | None] | None, quote: str) -> list[str]:
    """The rule `rule`: a string between marks, its length within `length` (minLength, maxLength).
    Where the mark is a token, the text runs up to it (no text can hold a token); where it is text,
    the text ends lazily at its first closing mark."""
    low, high = length or (0, None)
    if quote.startswith("<["):
        text = f"/(?s:.{repeat(max(low, 1), high)})/"
        return [f"{rule}: {quote} {text}{'' if low else '?'} {quote}"] if high != 0 else [f"{rule}: {quote} {quote}"]
    return [f"{rule}: {quote} {rule}_text", f'{rule}_text[lazy]: /(?s:.{repeat(low, high)})<\\|"\\|>/']


def _function_rules(rule: str, function: dict, quote: str) -> list[str]:
    parameters = function.get("parameters")
    head = json.dumps(f"{function['name']}{{")
    named = properties(parameters)
    if named is None:
        return [f'{rule}: {head} (g_member ("," g_member)*)? "}}"']
    lines, members = [], []
    for index, (name, schema) in enumerate(sorted(named[0].items(), key=lambda item: item[0].lower())):
        lines += _value_rules(f"{rule}_{index}_value", schema, parameters, quote)
        lines.append(f"{rule}_{index}: {json.dumps(name + ':')} {rule}_{index}_value")
        members.append((f"{rule}_{index}", name in named[1]))
    return [*lines, f'{rule}: {head} {_members(members)} "}}"']


def _members(members: list[tuple[str, bool]]) -> str:
    """The keys in order, commas between those written: each required one always, each other one optionally."""

    def tail(at: int) -> str:  # after a key was written: each later one with its comma
        return " ".join(f'("," {rule})' + ("" if required else "?") for rule, required in members[at:])

    def first(at: int) -> str:  # nothing written yet: the first key written has no comma
        if at == len(members):
            return ""
        rule, required = members[at]
        written = f"{rule} {tail(at + 1)}".strip()
        if required:
            return written
        rest = first(at + 1)
        return f"(({written}) | {rest})" if rest else f"({written})?"

    return first(0)


def _value_rules(rule: str, schema, root, quote: str) -> list[str]:
    choices = enum_values(schema, root)
    if choices is not None and not any(isinstance(choice, (dict, list)) for choice in choices):
        spellings = []
        for choice in choices:
            if isinstance(choice, str):
                spellings.append(f"{quote} {json.dumps(choice)} {quote}")
            else:
                spellings.append(json.dumps(value_text(choice)))
        return [f"{rule}: " + " | ".join(dict.fromkeys(spellings))]
    types = value_types(schema, root)
    if not types:
        return [f"{rule}: g_value"]
    alternatives, lines = [], []
    if "string" in types:
        length = string_length(schema, root) if types == ["string"] else None
        lines += _string_rules(f"{rule}_string", length, quote) if length else []
        alternatives.append(f"{rule}_string" if length else "g_string")
    for kind, alternative in (("boolean", "G_BOOLEAN"), ("null", "G_NULL")):
        if kind in types:
            alternatives.append(alternative)
    numeric = [kind for kind in types if kind in ("integer", "number")]
    if numeric:  # JSON's numbers are the notation's: %json holds one to its bounds
        bounds = {key: value for key, value in resolve(schema, root).items() if key in NUMBER_KEYWORDS}
        embedded = grammar_schema({**bounds, "type": numeric if len(numeric) > 1 else numeric[0]})
        lines.append(f"{rule}_number: %json {json.dumps(embedded)}")
        alternatives.append(f"{rule}_number")
    alternatives += [shape for kind, shape in (("object", "g_object"), ("array", "g_list")) if kind in types]
    return [*lines, f"{rule}: " + " | ".join(alternatives)]
