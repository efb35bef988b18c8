"""How a JSON schema is read for a grammar: closed objects and bounded numbers.

Two rewrites make a schema's grammar one a small model can finish, without refusing what the
schema itself states:

- **Closed objects.** An object that lists its properties and says nothing of others allows no
  others, as vLLM's default grammar back end (xgrammar's strict mode) reads schemas: left open, a
  small model fills objects with invented keys until max_tokens.
- **Bounded numbers.** JSON numbers have no length; a model that likes a digit writes
  `21000000000000000000000…` until max_tokens and the reply never parses (llama.cpp's schema
  converter bounds an integral part to 16 digits for this reason). Each bound a number's schema
  leaves open is closed: a missing `minimum` / `maximum` (or exclusive form) becomes I-JSON's
  interoperable limit (RFC 7493: +-(2**53 - 1), exactly representable as a double and in
  JavaScript, so 16 digits at most, and no exponent), and a `number` without `multipleOf` keeps
  at most FRACTION_DIGITS decimals. What the schema states is kept: that is how to ask for larger
  values (up to the 64-bit integers llguidance takes) or another step. Values the schema leaves
  free (`{}`, an object without properties, an array without items, `json_object`) are any JSON
  value under the same bounds (ANY_VALUE). MINIVLLM_JSON_NUMBER_BOUNDS=0 turns this rewrite off
  for the whole server (numbers of any length, exponents, unlimited decimals).

Whitespace is the third bound and needs no rewrite: grammars are compact (structured.JSON_OPTIONS),
with no optional whitespace between tokens at all.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

from ..env import env_bool

SAFE_INTEGER = 2**53 - 1
# llguidance reads multipleOf through a float: 1e-10 is the smallest power of ten it takes exactly
FRACTION_DIGITS = 10
_ANNOTATIONS = frozenset(("title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"))
ANY_NAME = "minivllm_any_json"
# referred to by its own absolute $id, not a "#/..." pointer: a free value inside a sub-schema with
# an $id of its own would resolve a pointer against that sub-schema
ANY_ID = "urn:minivllm:any-json"
ANY_REF = {"$ref": ANY_ID}
ANY_VALUE = {
    "$id": ANY_ID,
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number", "minimum": -SAFE_INTEGER, "maximum": SAFE_INTEGER, "multipleOf": 10.0**-FRACTION_DIGITS},
        {"type": "string"},
        {"type": "array", "items": ANY_REF},
        {"type": "object", "additionalProperties": ANY_REF},
    ],
}

# Keywords whose value is one sub-schema, a list of them, or a map of them. allOf, not and
# if/then/else are left alone: closing or bounding a part of allOf would refuse what the other
# parts declare, and doing so inside not or if would turn their meaning round.
_SUBSCHEMA = ("items", "additionalProperties", "contains", "additionalItems")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems", "items")  # items: a list in older drafts
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
# An object beside any of these may hold keys its own properties do not list: it stays open.
_OPEN_KEYWORDS = (
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
    "if",
    "dependentSchemas",
)


def _map_subschemas(schema: dict, rewrite) -> dict:
    """A copy of `schema` with `rewrite` applied to each of its direct sub-schemas."""
    for key in _SUBSCHEMA:
        if isinstance(schema.get(key), (dict, bool)):
            schema[key] = rewrite(schema[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            schema[key] = [rewrite(item) for item in schema[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            schema[key] = {name: rewrite(sub) for name, sub in schema[key].items()}
    return schema


def closed_objects(schema):
    """A copy of `schema` where an object that lists its properties and says nothing of others
    allows no others. Objects whose required keys are not all listed, or that combine with other
    schemas, are left as they are."""
    if not isinstance(schema, dict):
        return schema
    closed = dict(schema)
    properties = closed.get("properties")
    if (
        isinstance(properties, dict)
        and not any(key in closed for key in _OPEN_KEYWORDS)
        and all(key in properties for key in closed.get("required") or [] if isinstance(key, str))
    ):
        closed["additionalProperties"] = False
    return _map_subschemas(closed, closed_objects)


def _types(schema: dict) -> set:
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    return {name for name in declared if isinstance(name, str)} if isinstance(declared, list) else set()


def _holds_a_step(low, high, exclusive_low: bool, exclusive_high: bool) -> bool:
    """Whether [low, high] (open where exclusive) holds a multiple of the decimal step, so that
    adding it leaves the schema satisfiable (a range such as [1e-11, 9e-11] does not)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
        return True
    step = Decimal(1).scaleb(-FRACTION_DIGITS)
    first = (Decimal(str(low)) / step).to_integral_value(rounding=ROUND_CEILING) * step
    if exclusive_low and first == Decimal(str(low)):
        first += step
    return first < Decimal(str(high)) or (first == Decimal(str(high)) and not exclusive_high)


def _bounded(schema):
    if schema is True or (isinstance(schema, dict) and set(schema) <= _ANNOTATIONS):
        return dict(ANY_REF)  # any value, under the number bounds
    if not isinstance(schema, dict):
        return schema
    bounded = dict(schema)
    types = _types(bounded)
    if types & {"integer", "number"} and "enum" not in bounded and "const" not in bounded:
        low = bounded.get("minimum", bounded.get("exclusiveMinimum"))
        high = bounded.get("maximum", bounded.get("exclusiveMaximum"))
        if low is None and (not isinstance(high, (int, float)) or high > -SAFE_INTEGER):
            bounded["minimum"] = -SAFE_INTEGER
        if high is None and (not isinstance(low, (int, float)) or low < SAFE_INTEGER):
            bounded["maximum"] = SAFE_INTEGER
        inclusive_low, inclusive_high = "minimum" in bounded, "maximum" in bounded
        if (
            "number" in types
            and "multipleOf" not in bounded
            and _holds_a_step(
                bounded.get("minimum", bounded.get("exclusiveMinimum")),
                bounded.get("maximum", bounded.get("exclusiveMaximum")),
                not inclusive_low,
                not inclusive_high,
            )
        ):
            bounded["multipleOf"] = 10.0**-FRACTION_DIGITS
    if "object" in types and not any(key in bounded for key in ("properties", "additionalProperties", "patternProperties")):
        bounded["additionalProperties"] = dict(ANY_REF)
    if "array" in types and "items" not in bounded and "prefixItems" not in bounded:
        bounded["items"] = dict(ANY_REF)
    return _map_subschemas(bounded, _bounded)


def _uses_any(schema) -> bool:
    if isinstance(schema, dict):
        return schema.get("$ref") == ANY_REF["$ref"] or any(_uses_any(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_uses_any(item) for item in schema)
    return False


def bounded_numbers(schema):
    """A copy of `schema` whose numbers without bounds of their own are bounded (module docstring),
    with ANY_VALUE among the root's $defs where a free value needs it."""
    bounded = _bounded(schema)
    if not isinstance(bounded, dict) or not _uses_any(bounded):
        return bounded
    definitions = bounded.get("$defs", {})
    if not isinstance(definitions, dict):
        return bounded  # not a schema llguidance will take: its error, not ours, reaches the client
    return {**bounded, "$defs": {**definitions, ANY_NAME: ANY_VALUE}}


def grammar_schema(schema):
    """The schema a JSON grammar is compiled from: objects closed, numbers bounded (unless
    MINIVLLM_JSON_NUMBER_BOUNDS=0; read per grammar, so web processes and engines agree)."""
    closed = closed_objects(schema)
    return bounded_numbers(closed) if env_bool("MINIVLLM_JSON_NUMBER_BOUNDS", True) else closed
