"""Each model family's tool-call format: calls written and read back, replies that are not calls
left as content, the served model's parser chosen from its template or the setting, and each
format's grammar forcing, in the engine, calls that its own parser reads and whose arguments
validate. Every format (Qwen3-Coder's XML blocks and Gemma 4's notation included) reads the same
near misses; the two text formats' own details are in test_xml_tool_calls.py and
test_gemma4_tool_calls.py."""

import json

import jsonschema
import pytest

from inference.api.common.tool_calls import ToolRequest, parse_tool_calls
from inference.api.common.tool_parsers import (
    PARSERS,
    Gemma4ToolParser,
    HermesToolParser,
    Llama3JsonToolParser,
    Qwen3CoderToolParser,
    parser_for_template,
    tool_parser_for,
)
from inference.api.openai.stream_format import CallHoldback
from inference.engine.sample.sampling_params import SamplingParams
from tests.support.engine_helpers import run_to_completion

WEATHER = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
ADD = {
    "name": "add",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a"],
        "additionalProperties": False,
    },
}
FUNCTIONS = {"get_weather": WEATHER["parameters"], "add": ADD["parameters"]}
CALLS = [("get_weather", {"city": "Paris", "unit": "celsius"}), ("add", {"a": 2})]
EVERY_FORMAT = [HermesToolParser(), Llama3JsonToolParser(), Qwen3CoderToolParser(), Gemma4ToolParser()]


@pytest.mark.parametrize("parser", EVERY_FORMAT, ids=lambda p: p.name)
def test_calls_written_in_a_format_read_back_the_same(parser):
    assert parser.parse(parser.calls_text(CALLS), FUNCTIONS) == (None, CALLS)
    assert parser.parse(parser.call_text("rm", {}), FUNCTIONS)[1] == []  # not one of the request's functions
    assert parser.parse("It is sunny in Paris.", FUNCTIONS) == ("It is sunny in Paris.", [])


def test_llama3_reads_the_python_tag_and_parameters_and_leaves_other_json_as_content():
    parser = Llama3JsonToolParser()
    text = '<|python_tag|>{"name": "add", "parameters": {"a": 1}}; {"name": "add", "arguments": {"a": 3}}'
    assert parser.parse(text, FUNCTIONS) == (None, [("add", {"a": 1}), ("add", {"a": 3})])
    half = '{"name": "add", "parameters": {"a": 1}} and then some words'
    assert parser.parse(half, FUNCTIONS) == (half, [])  # not wholly calls: content, as vLLM reads it
    assert parser.parse('{"city": "Paris"}', FUNCTIONS) == ('{"city": "Paris"}', [])
    for odd in ('{"name": ["add"], "parameters": {}}', '{"name": {"a": 1}}', "[" * 5000 + "]" * 5000):
        assert parser.parse(odd, FUNCTIONS) == (odd, [])  # whatever the model writes, never an exception
    assert HermesToolParser().parse('<tool_call>{"name": ["add"]}</tool_call>', FUNCTIONS)[1] == []


def test_hermes_keeps_the_text_around_its_calls_as_content():
    parser = HermesToolParser()
    text = "Let me look.\n" + parser.call_text("add", {"a": 1})
    assert parser.parse(text, FUNCTIONS) == ("Let me look.", [("add", {"a": 1})])


def test_hermes_reads_a_call_whose_argument_holds_its_closing_tag():
    """A forced call's string may hold `</tool_call>` (the grammar allows any string): the block is
    read as JSON first, so the tag inside the string does not end it."""
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris</tool_call>x"}}\n</tool_call>'
    assert HermesToolParser().parse(f"Sure. {call}", FUNCTIONS) == ("Sure.", [("get_weather", {"city": "Paris</tool_call>x"})])


def test_the_served_models_parser_comes_from_its_template_or_the_setting(smollm_tokenizer, settings):
    assert isinstance(parser_for_template(smollm_tokenizer.chat_template), HermesToolParser)
    llama3 = "{%- if tools %}...<|python_tag|>{{ tool_call | tojson }}{%- endif %}"
    assert isinstance(parser_for_template(llama3), Llama3JsonToolParser)
    assert isinstance(parser_for_template(None), HermesToolParser)
    llama32 = 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
    assert isinstance(parser_for_template(llama32), Llama3JsonToolParser)  # 3.2's lightweight template names no tag
    assert isinstance(tool_parser_for(smollm_tokenizer), HermesToolParser)
    assert isinstance(parser_for_template("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"), Qwen3CoderToolParser)
    assert isinstance(parser_for_template("{{- '<|tool_call>call:' + function['name'] + '{' -}}"), Gemma4ToolParser)
    settings.MINIVLLM_TOOL_CALL_PARSER = "llama3_json"
    assert isinstance(tool_parser_for(smollm_tokenizer), Llama3JsonToolParser)


def test_the_setting_offers_every_parser(settings):
    assert set(settings.TOOL_CALL_PARSERS) == set(PARSERS)
    assert settings.MINIVLLM_TOOL_CALL_PARSER in ("auto", *PARSERS)


@pytest.mark.parametrize("parser", EVERY_FORMAT, ids=lambda p: p.name)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_forced_call_in_each_format_is_read_back_by_its_parser(engine, parser, temperature):
    """A random model says nothing sensible, yet under the format's grammar every reply is calls
    that the same format's parser reads, with arguments that fit their schemas."""
    request = ToolRequest([{"type": "function", "function": f} for f in (WEATHER, ADD)], "required", True, parser)
    spec = {"kind": "lark", "value": request.grammar(), "param": "tool_choice"}
    engine.grammars.compile(spec)
    rid = f"{parser.name}-{temperature}"
    engine.add_request(
        rid, engine.tokenize("Call:"), SamplingParams(max_tokens=200, temperature=temperature, seed=5, structured=spec)
    )
    outputs = run_to_completion(engine)[rid]
    text = "".join(out.text for out in outputs)
    assert outputs[-1].finish_reason == "stop", text
    content, calls = parse_tool_calls(text, request)
    assert calls and content is None, text
    schemas = {"get_weather": WEATHER["parameters"], "add": ADD["parameters"]}
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), schemas[call.name])
    assert len(calls) <= 2  # at most as many calls as there are functions


def test_forced_arguments_keep_the_parameters_order(engine):
    """The parameters are written in the order their schema lists them (here not alphabetical),
    and a parameter schema's own $defs, moved to the call's root, still resolve."""
    book = {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {"when": {"$ref": "#/$defs/day"}, "room": {"type": "integer"}, "at": {"type": "boolean"}},
            "required": ["when", "room", "at"],
            "$defs": {"day": {"enum": ["mon", "tue"]}},
        },
    }
    request = ToolRequest([{"type": "function", "function": book}], "required", False, HermesToolParser())
    spec = {"kind": "lark", "value": request.grammar(), "param": "tool_choice"}
    for seed in (1, 2):
        engine.add_request(
            f"order-{seed}", engine.tokenize("Call:"), SamplingParams(max_tokens=80, temperature=1.0, seed=seed, structured=spec)
        )
        text = "".join(out.text for out in run_to_completion(engine)[f"order-{seed}"])
        (call,) = parse_tool_calls(text, request)[1]
        arguments = json.loads(call.arguments)
        assert list(arguments) == ["when", "room", "at"] and abs(arguments["room"]) <= 2**53 - 1, text
        assert arguments["when"] in ("mon", "tue"), text  # the $ref resolved to the moved $defs
        jsonschema.validate(arguments, book["parameters"])


CALL = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
PARIS = ("get_weather", {"city": "Paris", "unit": "celsius"})
NEAR_MISSES = [
    (f"```json\n{CALL}\n```", None, [PARIS]),  # fenced, as Qwen2.5-Coder-1.5B wrote it
    (f"```\n{CALL}\n```", None, [PARIS]),
    (CALL, None, [PARIS]),  # bare
    (f"Sure, I can check that.\n\n```json\n{CALL}\n```", "Sure, I can check that.", [PARIS]),  # the tail after text
    (f"Checking: {CALL}", "Checking:", [PARIS]),
    (CALL.replace("arguments", "parameters"), None, [PARIS]),
    (f'[{CALL}, {{"name": "add", "arguments": {{"a": 3}}}}]', None, [PARIS, ("add", {"a": 3})]),  # a list
    ('{"name": "add", "arguments": "{\\"a\\": 3}"}', None, [("add", {"a": 3})]),  # arguments as a JSON string
]
NOT_CALLS = [
    '{"city": "Paris", "unit": "celsius"}',  # ordinary JSON
    '```json\n{"name": "Paris", "country": "France"}\n```',
    CALL.replace("get_weather", "get_time"),  # a function the request did not offer
    CALL.replace("celsius", "kelvin"),  # arguments that do not validate
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',  # a required argument missing
    f"{CALL}\nThat is the call I would make.",  # not the tail
    f"[{CALL}, 5]",  # a list that is not all calls
    '{"name": "add", "arguments": {"a": 3}, "id": 1}',  # more than a call
]


@pytest.mark.parametrize("parser", EVERY_FORMAT, ids=lambda p: p.name)
@pytest.mark.parametrize("reply, content, calls", NEAR_MISSES)
def test_near_miss_calls_are_read_when_they_name_an_offered_function_with_valid_arguments(parser, reply, content, calls):
    assert parser.parse(reply, FUNCTIONS) == (content, calls)


@pytest.mark.parametrize("parser", EVERY_FORMAT, ids=lambda p: p.name)
@pytest.mark.parametrize("reply", NOT_CALLS)
def test_json_that_is_not_exactly_an_offered_valid_call_stays_content(parser, reply):
    assert parser.parse(reply, FUNCTIONS) == (reply, [])


def test_hermes_reads_a_call_whose_closing_tag_never_came():
    parser = HermesToolParser()
    assert parser.parse(f"Let me see.\n<tool_call>\n{CALL}\n", FUNCTIONS) == ("Let me see.", [PARIS])
    two = f'<tool_call>{{"name": "add", "arguments": {{"a": 1}}}}</tool_call>\n<tool_call>{CALL}'
    assert parser.parse(two, FUNCTIONS) == (None, [("add", {"a": 1}), PARIS])
    unfinished = '<tool_call>{"name": "get_weather", "arguments": {"city": "Par'
    assert parser.parse(unfinished, FUNCTIONS) == (unfinished, [])
    # in the tags, `parameters` is a near miss too: read when valid, never as empty arguments
    assert parser.parse(f"<tool_call>{CALL.replace('arguments', 'parameters')}</tool_call>", FUNCTIONS) == (None, [PARIS])
    wrong = '<tool_call>{"name": "add", "parameters": {"a": 500}}</tool_call>'
    assert parser.parse(wrong, FUNCTIONS) == (wrong, [])


def streamed(parser, reply: str) -> tuple[str, str]:
    """(what a stream showed as the reply came three characters at a time, what it still held)."""
    held = CallHoldback(parser)
    shown = "".join(held.add(0, reply[at : at + 3]) for at in range(0, len(reply), 3))
    return shown, held.rest(0)


@pytest.mark.parametrize("parser", EVERY_FORMAT, ids=lambda p: p.name)
@pytest.mark.parametrize("reply, content, calls", NEAR_MISSES)
def test_a_stream_never_shows_a_near_miss_call_and_ends_with_the_same_content(parser, reply, content, calls):
    shown, _ = streamed(parser, reply)
    held = CallHoldback(parser)
    held.text[0], held.shown[0] = reply, len(shown)
    assert (shown + held.unshown(0, content)).strip() == (content or "")


@pytest.mark.parametrize("parser", EVERY_FORMAT, ids=lambda p: p.name)
@pytest.mark.parametrize("reply", NOT_CALLS)
def test_a_stream_of_json_that_is_not_a_call_sends_all_of_it(parser, reply):
    shown, rest = streamed(parser, reply)
    assert shown + rest == reply


def test_a_llama3_stream_of_several_calls_shows_none_of_them():
    parser = Llama3JsonToolParser()
    reply = parser.calls_text([("add", {"a": 1}), ("add", {"a": 2})])
    shown, rest = streamed(parser, reply)
    assert shown == "" and rest == reply and parser.parse(reply, FUNCTIONS) == (None, [("add", {"a": 1}), ("add", {"a": 2})])


def test_a_near_miss_is_checked_without_fetching_refs_or_failing_on_odd_schemas(tmp_path):
    """A client's parameters are checked as they are: a $ref to a URL or a file is never fetched
    (it stays unresolved, so the reply stays content), a schema jsonschema cannot use is no match
    rather than an error, and patterns read as JSON schemas write them (\\p{L})."""
    anything = tmp_path / "anything.json"
    anything.write_text('{"type": "object"}')  # were it fetched, every argument would fit
    reply = '{"name": "f", "arguments": {"a": 1}}'
    for parameters in (
        {"$ref": anything.as_uri()},
        {"$ref": "http://127.0.0.1:9/schema.json"},
        {"type": "object", "properties": {"a": {"type": "int"}}},
    ):
        assert HermesToolParser().parse(reply, {"f": parameters}) == (reply, [])
    letters = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\\p{L}+$"}}}
    assert HermesToolParser().parse('{"name": "f", "arguments": {"a": "abc"}}', {"f": letters}) == (None, [("f", {"a": "abc"})])
    assert HermesToolParser().parse('{"name": "f", "arguments": {"a": "a1"}}', {"f": letters})[1] == []


def test_forced_parameters_that_are_a_resource_of_their_own_keep_their_definitions(engine):
    """Parameters with an $id resolve their refs against themselves: their $defs stay with them, so
    the grammar takes a `when` that is one of the $defs' days and nothing else, and every forced
    reply is a call whose arguments validate against the parameters."""
    parameters = {
        "$id": "http://example.com/book",
        "type": "object",
        "properties": {"when": {"$ref": "#/$defs/day"}},
        "required": ["when"],
        "additionalProperties": False,
        "$defs": {"day": {"enum": ["mon", "tue"]}},
    }
    parser = HermesToolParser()
    request = ToolRequest(
        [{"type": "function", "function": {"name": "book", "parameters": parameters}}], "required", False, parser
    )
    spec = {"kind": "lark", "value": request.grammar(), "param": "tool_choice"}

    def accepts(when) -> bool:
        call = json.dumps({"name": "book", "arguments": {"when": when}}, separators=(",", ":"))
        tokens = engine.tokenize(f"{parser.OPEN}{call}{parser.CLOSE}")
        matcher = engine.grammars.matcher(spec)
        return matcher.validate_tokens(tokens) == len(tokens) and matcher.consume_tokens(tokens) and matcher.is_accepting()

    assert accepts("mon") and accepts("tue")
    assert not accepts("wed") and not accepts(3)
    for seed in (1, 2, 3):
        engine.add_request(
            f"defs-{seed}", engine.tokenize("Call:"), SamplingParams(max_tokens=60, temperature=1.0, seed=seed, structured=spec)
        )
        text = "".join(out.text for out in run_to_completion(engine)[f"defs-{seed}"])
        (call,) = parse_tool_calls(text, request)[1]
        jsonschema.validate(json.loads(call.arguments), parameters)
