"""Qwen3-Coder's XML function-call form (api/common/xml_tool_calls.py): values read back as the
types their parameter schema gives them, calls found wherever a model writes them (in tags, a block
never closed, a function block without tags, a JSON call in the tags as a near miss), and the call
grammar holding function names, parameter names and typed values to the offered functions, matched
by llguidance on the SmolLM2 tokenizer. The official Qwen3.5 template's own text is in
test_tools_qwen35.py."""

from __future__ import annotations

import pytest

from inference.api.common import xml_tool_calls
from inference.api.common.tool_calls import ToolRequest
from inference.api.common.tool_parsers import Qwen3CoderToolParser
from inference.api.openai.stream_format import CallHoldback
from tests.support.grammar_checks import accepts, grammars_for

BOOK = {
    "name": "book",
    "parameters": {
        "type": "object",
        "properties": {
            "room": {"type": "string", "maxLength": 8},
            "nights": {"type": "integer", "minimum": 1, "maximum": 30},
            "price": {"type": "number"},
            "breakfast": {"type": "boolean"},
            "when": {"$ref": "#/$defs/day"},
            "guests": {"type": "array", "items": {"type": "string"}},
            "extras": {"type": "object"},
            "note": {"type": ["string", "null"]},
            "floor": {"type": ["integer", "null"]},
            "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["room", "nights"],
        "$defs": {"day": {"enum": ["mon", "tue"]}},
    },
}
ANYTHING = {"name": "log", "parameters": {"type": "object"}}
FUNCTIONS = {BOOK["name"]: BOOK["parameters"], ANYTHING["name"]: ANYTHING["parameters"]}
PARSER = Qwen3CoderToolParser()


def call(name: str, **values: str) -> str:
    """A call as the model writes it, each value's text as given."""
    written = "".join(f"<parameter={key}>\n{text}\n</parameter>\n" for key, text in values.items())
    return f"<tool_call>\n<function={name}>\n{written}</function>\n</tool_call>"


@pytest.mark.parametrize(
    "parameter, text, value",
    [
        ("nights", "3", 3),
        ("nights", "three", "three"),  # not an integer: the text, as written
        ("price", "12.5", 12.5),
        ("price", "12", 12),
        ("breakfast", "True", True),  # as the template writes Python's booleans
        ("breakfast", "false", False),
        ("when", "mon", "mon"),  # a $ref followed to its enum
        ("guests", '["Ann", "Bo"]', ["Ann", "Bo"]),
        ("extras", "{'late': True}", {"late": True}),  # Python's spelling of an object
        ("extras", "[1]", "[1]"),  # a list where an object goes: the text
        ("note", "null", None),
        ("note", "007", "007"),  # a string stays a string
        ("floor", "None", None),
        ("floor", "4", 4),
        ("size", "5", 5),  # the types of anyOf's alternatives
        ("size", "null", None),
        ("room", "  two\nlines  ", "  two\nlines  "),  # text is kept as written, blanks and lines included
        ("unlisted", "5", "5"),  # a parameter the schema does not name: text
    ],
)
def test_a_value_is_read_as_the_type_its_schema_gives_it(parameter, text, value):
    content, calls = PARSER.parse(call("book", **{parameter: text}), FUNCTIONS)
    assert content is None and calls == [("book", {parameter: value})]


def test_calls_written_with_typed_values_read_back_the_same():
    arguments = {"room": "A1", "nights": 2, "price": 99.5, "breakfast": False, "guests": ["Ann"], "extras": {"cot": 1}}
    calls = [("book", arguments), ("log", {"line": "one\ntwo"})]
    text = PARSER.calls_text(calls)
    assert "<parameter=breakfast>\nFalse\n</parameter>" in text and '<parameter=extras>\n{"cot": 1}\n' in text
    assert PARSER.parse(text, FUNCTIONS) == (None, calls)


def test_calls_are_found_where_models_write_them_and_the_rest_is_content():
    one, two = call("book", room="A1", nights="2"), call("log", line="x")
    assert PARSER.parse(f"Let me book it.\n\n{one}\n{two}", FUNCTIONS) == (
        "Let me book it.",
        [("book", {"room": "A1", "nights": 2}), ("log", {"line": "x"})],
    )
    unclosed = "Booking.\n<tool_call>\n<function=book>\n<parameter=room>\nA1\n</parameter>\n<parameter=nights>\n2"
    assert PARSER.parse(unclosed, FUNCTIONS) == ("Booking.", [("book", {"room": "A1", "nights": 2})])
    bare = "<function=book>\n<parameter=room>\nA1\n</parameter>\n</function>"
    assert PARSER.parse(bare, FUNCTIONS) == (None, [("book", {"room": "A1"})])
    # a parameter whose closing tag never came ends where the next one starts (as vLLM reads it)
    sloppy = "<tool_call>\n<function=book>\n<parameter=room>\nA1\n<parameter=nights>\n2\n</function>\n</tool_call>"
    assert PARSER.parse(sloppy, FUNCTIONS) == (None, [("book", {"room": "A1", "nights": 2})])


def test_a_call_to_another_function_or_a_broken_block_stays_content():
    other = call("delete_everything", path="/")
    assert PARSER.parse(other, FUNCTIONS) == (other, [])
    mixed = f"{other}\n{call('log', line='x')}"
    assert PARSER.parse(mixed, FUNCTIONS) == (other, [("log", {"line": "x"})])
    assert PARSER.parse("<tool_call>\nnot a call\n</tool_call>", FUNCTIONS)[1] == []


def test_a_json_call_in_the_tags_is_a_near_miss_read_only_when_it_validates():
    good = '<tool_call>\n{"name": "book", "arguments": {"room": "A1", "nights": 2}}\n</tool_call>'
    assert PARSER.parse(good, FUNCTIONS) == (None, [("book", {"room": "A1", "nights": 2})])
    bad = '<tool_call>\n{"name": "book", "arguments": {"room": "A1", "nights": 99}}\n</tool_call>'
    assert PARSER.parse(bad, FUNCTIONS) == (bad, [])


def test_a_stream_shows_the_text_before_a_call_and_holds_the_call():
    reply = "Let me book it.\n\n" + call("book", room="A1", nights="2")
    held = CallHoldback(PARSER)
    shown = "".join(held.add(0, reply[at : at + 4]) for at in range(0, len(reply), 4))
    assert shown == "Let me book it." and held.calling == {0}
    held = CallHoldback(PARSER)
    assert held.add(0, "a <func") == "a" and held.add(0, "tional> b") == " <functional> b"  # not a tag after all
    bare = CallHoldback(PARSER)
    assert bare.add(0, "<function=book>\n") == "" and bare.calling == {0}


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return grammars_for(smollm_tokenizer)


def forced(*functions: dict, most: int = 1) -> str:
    request = ToolRequest([{"type": "function", "function": f} for f in functions], "required", most > 1, PARSER)
    return request.grammar()


@pytest.mark.parametrize(
    "values, ok",
    [
        ({"room": "A1", "nights": "2"}, True),
        ({"room": "A1", "nights": "2", "breakfast": "True", "when": "tue", "guests": '["Ann", "Bo"]'}, True),
        ({"room": "A1", "nights": "2", "price": "9.5", "extras": '{"cot": 1}', "note": "None", "floor": "null"}, True),
        ({"room": "A1", "nights": "2", "breakfast": "true"}, True),  # either spelling of a boolean
        ({"room": "B\nwing", "nights": "2"}, True),  # free text spans lines
        ({"nights": "2"}, False),  # a required parameter missing
        ({"nights": "2", "room": "A1"}, False),  # out of the schema's order
        ({"room": "A1", "nights": "31"}, False),  # past the integer's maximum
        ({"room": "A1", "nights": "two"}, False),
        ({"room": "A1", "nights": "2", "when": "wed"}, False),  # not one of the enum's values
        ({"room": "A1", "nights": "2", "breakfast": "yes"}, False),
        ({"room": "A long room name", "nights": "2"}, False),  # past maxLength
        ({"room": "A1", "nights": "2", "extras": '{"cot":1}'}, False),  # JSON spaced as tojson writes it, only
        ({"room": "A1", "nights": "2", "pool": "yes"}, False),  # a parameter the function does not have
    ],
)
def test_the_grammar_holds_parameters_to_the_schema(grammars, smollm_tokenizer, values, ok):
    assert accepts(grammars, smollm_tokenizer, forced(BOOK), call("book", **values)) is ok


def test_the_grammar_takes_only_offered_functions_and_any_parameter_where_none_are_named(grammars, smollm_tokenizer):
    grammar = forced(BOOK, ANYTHING, most=2)
    assert accepts(grammars, smollm_tokenizer, grammar, call("log", line="x", level="3"))
    assert accepts(grammars, smollm_tokenizer, grammar, call("log") + "\n" + call("book", room="A1", nights="2"))
    assert not accepts(grammars, smollm_tokenizer, grammar, call("rm", path="/"))
    assert not accepts(grammars, smollm_tokenizer, forced(BOOK), call("log", line="x"))  # a named choice: that one only
    trigger = ToolRequest([{"type": "function", "function": BOOK}], "auto", False, PARSER).trigger()["grammar"]["value"]
    bare = "<function=book>\n<parameter=room>\nA1\n</parameter>\n<parameter=nights>\n2\n</parameter>\n</function>"
    assert accepts(grammars, smollm_tokenizer, trigger, "\n" + call("book", room="A1", nights="2"))
    assert accepts(grammars, smollm_tokenizer, trigger, bare)  # a block opened without its tag
    assert xml_tool_calls.call_text("f", {}) == "<tool_call>\n<function=f>\n</function>\n</tool_call>"
