"""What a function parameter's JSON schema says its value is, for the tool-call formats that write
arguments as text rather than JSON (Qwen3-Coder's XML form, Gemma 4's notation): reading a value
back needs its type (the text `2` is an integer for one parameter and a string for another), and
their call grammars hold a typed value to its type. A local `$ref` is followed; what the schema
does not say is any value."""

from __future__ import annotations

JSON_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")
REF_HOPS = 8  # a chain of $refs longer than this (or a loop) says nothing
MAX_DEPTH = 16  # anyOf / oneOf nested deeper than this says nothing


def resolve(schema, root: dict | None) -> dict:
    """`schema` with a local `$ref` (`#/$defs/x`, `#/definitions/x`) into `root` followed; {} where
    it leads nowhere (a remote ref is never fetched: it says nothing)."""
    for _ in range(REF_HOPS):
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return schema
        if ref != "#" and not ref.startswith("#/"):
            return {}
        target = root
        for part in ref[2:].split("/") if ref != "#" else []:
            target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            return {}
        schema = {**target, **{key: value for key, value in schema.items() if key != "$ref"}}
    return {}


def type_of(value) -> str:
    """The JSON type of a Python value (as json.loads gives it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "string"


def value_types(schema, root: dict | None = None, depth: int = 0) -> list[str]:
    """The JSON types a value may take, in the schema's order; [] where the schema does not say
    (or nests its alternatives past MAX_DEPTH)."""
    if depth > MAX_DEPTH:
        return []
    schema = resolve(schema, root)
    declared = schema.get("type")
    if isinstance(declared, str):
        found = [declared]
    elif isinstance(declared, list):
        found = [item for item in declared if isinstance(item, str)]
    elif enum_values(schema, root) is not None:
        found = [type_of(value) for value in enum_values(schema, root)]
    elif any(isinstance(schema.get(key), list) for key in ("anyOf", "oneOf")):
        alternatives = [item for key in ("anyOf", "oneOf") for item in schema.get(key) or []]
        found = [kind for item in alternatives for kind in value_types(item, root, depth + 1) or JSON_TYPES]
    elif "properties" in schema:
        found = ["object"]
    elif "items" in schema:
        found = ["array"]
    else:
        found = []
    return [kind for index, kind in enumerate(found) if kind in JSON_TYPES and kind not in found[:index]]


def enum_values(schema, root: dict | None = None) -> list | None:
    """The values a `const` or an `enum` allows, or None where the schema lists none."""
    schema = resolve(schema, root)
    if "const" in schema:
        return [schema["const"]]
    return schema["enum"] if isinstance(schema.get("enum"), list) and schema["enum"] else None


def string_length(schema, root: dict | None = None) -> tuple[int, int | None] | None:
    """(minLength, maxLength or None) where a string's schema bounds its length, else None: a
    grammar bounds a free-text value by them (a small model may otherwise write until max_tokens)."""
    schema = resolve(schema, root)
    low, high = schema.get("minLength"), schema.get("maxLength")
    low = low if isinstance(low, int) and not isinstance(low, bool) and low > 0 else 0
    high = high if isinstance(high, int) and not isinstance(high, bool) and high >= low else None
    return (low, high) if low or high is not None else None


def repeat(low: int, high: int | None) -> str:
    """A regex repetition `{low,high}` (`{low,}` with no upper bound)."""
    return f"{{{low},{'' if high is None else high}}}"


def properties(parameters) -> tuple[dict, set[str]] | None:
    """(a function's named parameters, the required ones), or None where its parameters name none
    (no schema, or one without `properties`: any parameter goes). Where they are named, a call
    grammar writes those names only, as a model is asked to."""
    if not isinstance(parameters, dict):
        return None
    named = parameters.get("properties")
    listed = parameters.get("required")
    required = {name for name in listed if isinstance(name, str)} if isinstance(listed, list) else set()
    if not isinstance(named, dict):
        return None
    return named, required
