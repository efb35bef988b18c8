"""Near misses of a tool call, read as calls (tool_parsers.py): a fenced ```json block, a bare JSON
object, a list of calls, `parameters` for `arguments`, a tag never closed. Only where the reply, or
its tail after some text, is exactly such a call to an offered function whose arguments validate
against its parameters (a client's patterns matched with a timeout, no $ref ever fetched); anything
else stays content. And what a stream holds back while its tail may still become one.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping

import jsonschema
import regex
from referencing import Registry

Call = tuple[str, dict]  # (name, arguments) of one call as read from a reply
Functions = Mapping[str, dict | None]  # the request's functions: name -> parameters schema (None: any object)


def tail_that_may_begin(text: str, marker: str) -> int:
    """How many trailing characters of `text` are a proper prefix of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def call_object(text: str, functions: Functions, *argument_keys: str) -> Call | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return call_value(value, functions, argument_keys)


def _names_an_offered_function(value, functions: Functions) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str) and value["name"] in functions


def call_value(value, functions: Functions, argument_keys) -> Call | None:
    """(name, arguments) when `value` is a call to an offered function with an object of arguments
    under one of `argument_keys` (the format's own: not checked against the parameters)."""
    if not _names_an_offered_function(value, functions):
        return None
    key = next((k for k in argument_keys if k in value), None)
    if key is None and any(k in value for k in ("arguments", "parameters")):
        return _valid_call(value, functions)  # the other key than the format's: a near miss, checked
    arguments = value[key] if key else {}
    return (value["name"], arguments) if isinstance(arguments, dict) else None


def _valid_call(value, functions: Functions) -> Call | None:
    """A near-miss call: exactly {"name", "arguments" or "parameters"} naming an offered function,
    whose arguments (an object, or a string holding one) validate against its parameters."""
    if not _names_an_offered_function(value, functions):
        return None
    keys = set(value) - {"name"}
    if len(keys) > 1 or not keys <= {"arguments", "parameters"}:
        return None
    arguments = value[keys.pop()] if keys else {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return (value["name"], arguments) if _arguments_fit(functions[value["name"]] or {"type": "object"}, arguments) else None


PATTERN_TIMEOUT_S = 0.05  # a client's pattern is matched on the event loop: never for long
NO_RETRIEVAL = Registry()  # a client's $ref to a URL or a file is never fetched: it is unresolvable


def _pattern(validator, pattern, instance, schema):
    """jsonschema's `pattern`, matched by `regex` with a timeout (a client's pattern could
    backtrack for ever under `re`; `regex` also reads the \\p{...} classes JSON schemas use)."""
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = regex.search(pattern, instance, timeout=PATTERN_TIMEOUT_S) is not None
    except (regex.error, TimeoutError):
        matched = False
    if not matched:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _validator_class(base):
    return jsonschema.validators.extend(base, {"pattern": _pattern})


def _arguments_fit(schema: dict, arguments: dict) -> bool:
    """Whether a near miss's arguments validate against the function's parameters. Any failure to
    check (a schema jsonschema refuses, an unknown type, a ref it may not fetch) means no: a near
    miss is never taken on trust."""
    try:
        validator = _validator_class(jsonschema.validators.validator_for(schema))
        return validator(schema, registry=NO_RETRIEVAL).is_valid(arguments)
    except Exception:
        return False


FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)\n?[ \t]*```\s*\Z", re.S)
# where a near-miss call may begin: a fence, an object, a list, or the start of a fence at the very end
CANDIDATE = re.compile(r"```|[{\[]|`{1,2}\Z")


def exact_calls(text: str, functions: Functions) -> list[Call]:
    """The calls when `text` (trimmed) is exactly a call, a list of calls, or either fenced; else []."""
    text = text.strip()
    fenced = FENCE.fullmatch(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    values = value if isinstance(value, list) else [value]
    calls = [_valid_call(item, functions) for item in values]
    return calls if calls and all(calls) else []


def near_miss_calls(text: str, functions: Functions) -> tuple[str | None, list[Call]] | None:
    """(the text before, the calls) where the reply or its tail is exactly a near-miss call; else None."""
    for candidate in CANDIDATE.finditer(text):
        calls = exact_calls(text[candidate.start() :], functions)
        if calls:
            return text[: candidate.start()].strip() or None, calls
    return None


def _may_become_calls(tail: str) -> bool:
    """Whether a stream's tail, from a candidate start, may still end up exactly a near-miss call:
    JSON that is unfinished, or finished with nothing after it (but a fence's close)."""
    if tail.startswith("`"):
        opening = re.match(r"`{1,3}[\w-]*[ \t]*\n?", tail)
        inner = tail[opening.end() :]
        if not tail.startswith("```"):
            return True  # a fence still being opened
        closing = inner.find("```")
        if closing != -1:
            return not inner[closing + 3 :].strip() and _may_become_calls(inner[:closing].strip())
        return not inner.strip() or _may_become_calls(inner.lstrip())
    try:
        _, end = json.JSONDecoder().raw_decode(tail)
    except json.JSONDecodeError as error:
        return error.pos >= len(tail.rstrip()) or error.msg.startswith("Unterminated string")  # unfinished, not wrong
    except RecursionError:
        return False
    rest = tail[end:].strip()
    return not rest or "```".startswith(rest)


def near_miss_start(text: str, shown: int = 0) -> int:
    """For a stream: where, at or after `shown`, the first candidate that may still become a
    near-miss call begins (held back until the reply ends); len(text) if none."""
    for candidate in CANDIDATE.finditer(text, shown):
        if _may_become_calls(text[candidate.start() :]):
            return before_blanks(text, candidate.start(), shown)
    return before_blanks(text, len(text), shown)


def before_blanks(text: str, at: int, shown: int) -> int:
    """`at`, moved back over the blanks before it: a stream holds them until it knows whether a
    call follows (the reply's content is trimmed around its calls), so both end the same."""
    while at > shown and text[at - 1].isspace():
        at -= 1
    return at


def held_split(text: str, shown: int, opens: tuple[str, ...]) -> tuple[int, bool]:
    """`split` for a tagged format: a call has begun at the first of `opens`; else content runs
    to a near-miss candidate or to a tail that may be the start of one of them."""
    found = [at for at in (text.find(tag, shown) for tag in opens) if at != -1]
    if found:
        return before_blanks(text, min(found), shown), True
    tail = max(tail_that_may_begin(text, tag) for tag in opens)
    return min(near_miss_start(text, shown), before_blanks(text, len(text) - tail, shown)), False
