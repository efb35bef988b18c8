"""How a schema is read for a grammar: numbers a model cannot run on with, bounds the schema states
kept, free values bounded alike, and properties written in the order the schema lists them. Each
is checked on the compiled grammar (an llguidance matcher over the real tokenizer), not only on
the rewritten schema."""

import json

import pytest

from inference.engine.sample.json_schemas import ANY_REF, SAFE_INTEGER, bounded_numbers, closed_objects, grammar_schema
from inference.engine.sample.structured import Grammars


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return Grammars(smollm_tokenizer, len(smollm_tokenizer), {smollm_tokenizer.eos_token_id})


def accepts(grammars, tokenizer, text: str, value, kind: str = "json_schema") -> bool:
    """Whether the spec's grammar takes `text` whole and may end there."""
    matcher = grammars.matcher({"kind": kind, "value": value})
    ids = tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


@pytest.mark.parametrize("kind", ["json_schema", "json_object"])
def test_numbers_the_schema_leaves_open_keep_to_i_json_and_ten_decimals(grammars, smollm_tokenizer, kind):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}}}
    value = schema if kind == "json_schema" else None

    def ok(n, x):
        return accepts(grammars, smollm_tokenizer, f'{{"n":{n},"x":{x}}}', value, kind)

    assert ok(SAFE_INTEGER, "0.1234567891") and ok(-SAFE_INTEGER, -SAFE_INTEGER) and ok(0, "-2.5")  # the most allowed
    assert not ok(SAFE_INTEGER + 1, 1) and not ok("2" + "0" * 29, 1)  # 17 digits, 30 digits
    assert not ok(1, "0.12345678912")  # eleven decimals
    assert not ok(1, "1e5") and not ok(1, "1E+10")  # no exponent


def test_bounds_the_schema_states_are_its_own(grammars, smollm_tokenizer):
    def ok(schema, text):
        return accepts(grammars, smollm_tokenizer, text, schema)

    big = 1234567890123456789  # 19 digits: a 64-bit integer beyond I-JSON
    assert ok({"type": "integer", "minimum": 0, "maximum": 9 * 10**18}, str(big))
    assert ok({"type": "integer", "minimum": 10**17}, str(10**17 + 1))  # the open side is not closed below the stated one
    assert not ok({"type": "integer", "minimum": 0}, str(-1)) and not ok({"type": "integer", "minimum": 0}, str(SAFE_INTEGER + 1))
    assert ok({"type": "number", "multipleOf": 0.5}, "2.5") and not ok({"type": "number", "multipleOf": 0.5}, "2.25")
    assert ok({"type": "integer", "enum": [10**18, 2]}, str(10**18))  # an enum or const is exactly what it lists
    assert bounded_numbers({"type": "integer", "maximum": 5})["minimum"] == -SAFE_INTEGER


def test_the_schemas_own_length_count_and_range_limits_hold(grammars, smollm_tokenizer):
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 5},
            "a": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
            "m": {"type": "integer", "maximum": 10},
        },
        "required": ["s", "a", "m"],
    }

    def ok(text):
        return accepts(grammars, smollm_tokenizer, text, schema)

    assert ok('{"s":"abcde","a":[true,false],"m":10}')
    assert not ok('{"s":"abcdef","a":[],"m":1}') and not ok('{"s":"","a":[true,true,true],"m":1}')
    assert not ok('{"s":"","a":[],"m":11}')


def test_values_the_schema_leaves_free_are_json_under_the_same_bounds(grammars, smollm_tokenizer):
    schema = {"type": "object", "properties": {"free": {}, "list": {"type": "array"}, "obj": {"type": "object"}}}
    rewritten = grammar_schema(schema)
    assert rewritten["properties"]["free"] == ANY_REF and rewritten["properties"]["list"]["items"] == ANY_REF
    assert rewritten["properties"]["obj"]["additionalProperties"] == ANY_REF
    good = '{"free":{"k":[1,null,"s",true,{"d":-0.5}]},"list":[[]],"obj":{"q":[2]}}'
    assert accepts(grammars, smollm_tokenizer, good, schema)
    assert not accepts(grammars, smollm_tokenizer, '{"free":{"k":[123456789012345678]}}', schema)
    assert not accepts(grammars, smollm_tokenizer, '{"obj":{"q":1e400}}', schema)


def test_the_bounds_can_be_turned_off_for_the_server(monkeypatch):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    monkeypatch.setenv("MINIVLLM_JSON_NUMBER_BOUNDS", "0")
    assert grammar_schema(schema)["properties"]["n"] == {"type": "integer"}
    monkeypatch.setenv("MINIVLLM_JSON_NUMBER_BOUNDS", "1")
    assert grammar_schema(schema)["properties"]["n"]["maximum"] == SAFE_INTEGER


def test_properties_come_in_the_schemas_order_and_each_order_is_its_own_grammar(grammars, smollm_tokenizer):
    listed = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "country": {"type": "string"}, "kind": {"enum": ["city"]}},
        "required": ["name", "country", "kind"],
    }
    reordered = {**listed, "properties": dict(sorted(listed["properties"].items()))}
    assert grammars.compile({"kind": "json_schema", "value": listed}) != grammars.compile(
        {"kind": "json_schema", "value": reordered}
    )
    in_order = json.dumps({"name": "a", "country": "b", "kind": "city"}, separators=(",", ":"))
    alphabetical = json.dumps({"country": "b", "kind": "city", "name": "a"}, separators=(",", ":"))
    assert accepts(grammars, smollm_tokenizer, in_order, listed) and not accepts(grammars, smollm_tokenizer, alphabetical, listed)
    assert accepts(grammars, smollm_tokenizer, alphabetical, reordered)


def test_objects_that_list_their_properties_allow_no_others_unless_the_schema_says_so():
    schema = {
        "type": "object",
        "properties": {
            "properties": {"type": "object", "properties": {"x": {"type": "integer"}}},  # a property named "properties"
            "free": {"type": "object", "properties": {"y": {}}, "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"properties": {"z": {}}}},
            "either": {"anyOf": [{"properties": {"w": {}}}, {"type": "null"}]},
            "both": {"allOf": [{"properties": {"p": {}}}, {"properties": {"q": {}}}]},
        },
        "$defs": {"thing": {"properties": {"t": {}}}},
    }
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is False and "additionalProperties" not in schema  # a copy
    properties = closed["properties"]
    assert set(properties) == set(schema["properties"])  # the map of properties is not itself a schema
    assert properties["properties"]["additionalProperties"] is False
    assert properties["free"]["additionalProperties"] == {"type": "string"}
    assert properties["list"]["items"]["additionalProperties"] is False
    assert properties["either"]["anyOf"][0]["additionalProperties"] is False
    assert properties["both"]["allOf"] == schema["properties"]["both"]["allOf"]
    assert "additionalProperties" not in closed_objects({"properties": {"a": {}}, "anyOf": [{"properties": {"b": {}}}]})
    assert "additionalProperties" not in closed_objects({"properties": {"a": {}}, "required": ["a", "b"]})
    assert closed_objects({"not": {"properties": {"a": {}}}}) == {"not": {"properties": {"a": {}}}}
    assert closed["$defs"]["thing"]["additionalProperties"] is False
    assert closed_objects({"type": "object"}) == {"type": "object"}  # any object stays any object


def test_the_rewrite_leaves_a_schema_it_can_compile_compilable(grammars, smollm_tokenizer):
    """A free value inside a sub-schema with its own $id (a "#/..." pointer would resolve there),
    and a range too narrow for the default decimal step, both compile and keep their meaning."""
    resource = {
        "type": "object",
        "properties": {"sub": {"$id": "http://example.com/sub", "type": "object", "properties": {"v": {}}}},
    }
    assert accepts(grammars, smollm_tokenizer, '{"sub":{"v":[1,"x"]}}', resource)
    tiny = {"type": "number", "minimum": 1e-11, "maximum": 9e-11}
    assert "multipleOf" not in grammar_schema(tiny)
    assert accepts(grammars, smollm_tokenizer, "0.00000000005", tiny)
    assert grammar_schema({"type": "number", "minimum": 0, "maximum": 1})["multipleOf"] == 1e-10
