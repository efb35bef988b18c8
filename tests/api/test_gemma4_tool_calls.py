"""Gemma 4's call notation (api/common/gemma4_tool_calls.py): values read and written as the template
writes them (bare sorted keys, strings between `<|"|>` marks), calls found in a reply and anything
broken left as content, and the call grammar, matched by llguidance on the SmolLM2 tokenizer both
with the marks as text and with them as added special tokens (as Gemma 4's own tokenizer holds
them). The official Gemma 4 template's own text is in test_tools_gemma4.py."""

from __future__ import annotations

import copy

import pytest

from inference.api.common import gemma4_tool_calls
from inference.api.common.tool_calls import ToolRequest
from inference.api.common.tool_parsers import Gemma4ToolParser
from inference.api.openai.stream_format import CallHoldback
from tests.support.grammar_checks import accepts, accepts_ids, encode, grammars_for, replay_trigger

Q = gemma4_tool_calls.QUOTE
BOOK = {
    "name": "book",
    "parameters": {
        "type": "object",
        "properties": {
            "room": {"type": "string", "maxLength": 8},
            "Nights": {"type": "integer", "minimum": 1, "maximum": 30},
            "breakfast": {"type": "boolean"},
            "when": {"enum": ["mon", "tue"]},
            "extras": {"type": "object"},
            "price": {"type": "number"},
        },
        "required": ["room", "Nights"],
    },
}
ANYTHING = {"name": "log", "parameters": {"type": "object"}}
FUNCTIONS = {BOOK["name"]: BOOK["parameters"], ANYTHING["name"]: ANYTHING["parameters"]}
PARSER = Gemma4ToolParser()


@pytest.mark.parametrize(
    "text, value",
    [
        (f"{Q}Paris, France{Q}", "Paris, France"),  # marks hold any text: commas, braces, lines
        (f"{Q}a{{b}}\nc{Q}", "a{b}\nc"),
        ("42", 42),
        ("-2.5", -2.5),
        ("1e+20", 1e20),
        ("true", True),
        ("None", None),
        ("null", None),
        (f"{{b:1,a:[1,{Q}x{Q}],c:{{}}}}", {"b": 1, "a": [1, "x"], "c": {}}),
        (f"{{{Q}quoted key{Q}:1}}", {"quoted key": 1}),
        ("{ a : 1 , b : [ ] }", {"a": 1, "b": []}),
        ("Paris", "Paris"),  # a bare word: the marks left out
    ],
)
def test_the_notation_reads_back(text, value):
    assert gemma4_tool_calls.read_value(text, 0) == (value, len(text))


@pytest.mark.parametrize("text", [f"{Q}never closed", "{a:1", "{a 1}", "[1 2]", "{:1}", "", "[" * 100 + "]" * 100])
def test_broken_notation_is_an_error_not_a_crash(text):
    with pytest.raises(ValueError):
        gemma4_tool_calls.read_value(text, 0)


def test_a_call_is_written_as_the_template_writes_it_and_read_back():
    arguments = {"room": "A1", "Nights": 2, "breakfast": True, "extras": {"z": None, "B": [1.5, "x"]}}
    text = PARSER.call_text("book", arguments)
    # keys sorted as Jinja's dictsort sorts them (case aside), strings between marks
    assert text == f"<|tool_call>call:book{{breakfast:true,extras:{{B:[1.5,{Q}x{Q}],z:None}},Nights:2,room:{Q}A1{Q}}}<tool_call|>"
    calls = [("book", arguments), ("log", {})]
    assert PARSER.parse(PARSER.calls_text(calls), FUNCTIONS) == (None, calls)


def test_calls_are_read_out_of_a_reply_and_the_rest_is_content():
    one = PARSER.call_text("book", {"room": "A1", "Nights": 2})
    assert PARSER.parse(f"Booking it.{one}<|tool_response>", FUNCTIONS) == (
        "Booking it.",
        [("book", {"room": "A1", "Nights": 2})],
    )
    unclosed = f"<|tool_call>call:log{{line:{Q}x{Q}}}"
    assert PARSER.parse(unclosed, FUNCTIONS) == (None, [("log", {"line": "x"})])
    for broken in (
        f"<|tool_call>call:rm{{path:{Q}/{Q}}}<tool_call|>",  # not an offered function
        f"<|tool_call>call:log{{line:{Q}x}}<tool_call|>",  # a string never closed
        "<|tool_call>call:log{line:1}} and more<tool_call|>",
        "<|tool_call>call:log[1]<tool_call|>",
    ):
        assert PARSER.parse(broken, FUNCTIONS) == (broken, [])


def test_a_stream_shows_the_text_before_a_call_and_holds_the_call():
    reply = "Let me book it." + PARSER.call_text("book", {"room": "A1", "Nights": 2})
    held = CallHoldback(PARSER)
    shown = "".join(held.add(0, reply[at : at + 3]) for at in range(0, len(reply), 3))
    assert shown == "Let me book it." and held.calling == {0}


def special_marks(tokenizer):
    """The tokenizer with Gemma 4's marks as added special tokens, as its own tokenizer holds them."""
    marked = copy.deepcopy(tokenizer)
    marked.add_special_tokens({"additional_special_tokens": ["<|tool_call>", "<tool_call|>", Q]})
    return marked


@pytest.fixture(scope="module", params=["text", "tokens"])
def marked(request, smollm_tokenizer):
    """(the tokenizer, its Grammars, the parser bound to it): the marks as text, then as tokens."""
    tokenizer = smollm_tokenizer if request.param == "text" else special_marks(smollm_tokenizer)
    return tokenizer, grammars_for(tokenizer), Gemma4ToolParser().bind(tokenizer)


def forced(parser, *functions: dict, most: int = 1) -> str:
    return ToolRequest([{"type": "function", "function": f} for f in functions], "required", most > 1, parser).grammar()


@pytest.mark.parametrize(
    "arguments, ok",
    [
        ({"room": "A1", "Nights": 2}, True),
        ({"room": "", "Nights": 2}, True),
        ({"room": "A1", "Nights": 2, "breakfast": False, "when": "tue", "extras": {"cot": [1, "x"]}, "price": 9.5}, True),
        ({"room": "B\nwing", "Nights": 2}, True),
        ({"Nights": 2}, False),  # a required key missing
        ({"room": "A1", "Nights": 31}, False),  # past the maximum
        ({"room": "A1", "Nights": "2"}, False),  # a string for an integer
        ({"room": "A1", "Nights": 2, "when": "wed"}, False),
        ({"room": "A long room name", "Nights": 2}, False),  # past maxLength
        ({"room": "A1", "Nights": 2, "pool": True}, False),  # a key the function does not have
    ],
)
def test_the_grammar_holds_keys_and_values_to_the_schema(marked, arguments, ok):
    tokenizer, grammars, parser = marked
    assert accepts(grammars, tokenizer, forced(parser, BOOK), parser.call_text("book", arguments)) is ok


def test_the_grammar_takes_the_keys_in_the_templates_order_only(marked):
    tokenizer, grammars, parser = marked
    ordered = parser.call_text("book", {"room": "A1", "Nights": 2})
    assert ordered.index("Nights") < ordered.index("room")  # dictsort: case aside
    swapped = f"<|tool_call>call:book{{room:{Q}A1{Q},Nights:2}}<tool_call|>"
    assert not accepts(grammars, tokenizer, forced(parser, BOOK), swapped)


def test_the_grammar_takes_only_offered_functions_and_any_keys_where_none_are_named(marked):
    tokenizer, grammars, parser = marked
    grammar = forced(parser, BOOK, ANYTHING, most=2)
    two = parser.calls_text([("log", {"line": "x", "level": 3}), ("book", {"room": "A1", "Nights": 2})])
    assert accepts(grammars, tokenizer, grammar, two)
    assert not accepts(grammars, tokenizer, grammar, parser.call_text("rm", {"path": "/"}))
    if parser.special:  # each mark is one token, in the grammar and in the text
        assert f"<[{parser.special[Q]}]>" in grammar and len(encode(tokenizer, Q)) == 1


def test_the_trigger_opens_at_the_tag_text_or_token_and_the_call_fits_from_there(marked):
    tokenizer, grammars, parser = marked
    spec = ToolRequest([{"type": "function", "function": BOOK}], "auto", False, parser).trigger()
    text = "Sure." + parser.call_text("book", {"room": "A1", "Nights": 2})
    written, opening, ids = replay_trigger(tokenizer, spec, text)
    assert written == "Sure.<|tool_call>" and tokenizer.decode(opening, skip_special_tokens=False) == "<|tool_call>"
    if parser.special:  # one added token: written as it, and the matcher fed it
        assert opening == [parser.special["<|tool_call>"]]
    assert accepts_ids(grammars, spec["grammar"], opening + encode(tokenizer, text[len(written) :]))
