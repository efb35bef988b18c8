"""Tool calling's parts: the grammar that forces a call, reading calls out of a reply, and what a
stream may show before it knows whether a call follows."""

import json

import pytest

from inference.api.common.chat_template import render_request
from inference.api.common.errors import ApiError
from inference.api.common.tool_calls import ToolRequest, parse_tool_calls
from inference.api.common.tool_parsers import HermesToolParser, Llama3JsonToolParser
from inference.api.openai.request import parse_chat
from inference.api.openai.stream_format import CallHoldback

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ADD = {
    "type": "function",
    "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}},
}
MSGS = [{"role": "user", "content": "Weather in Paris?"}]
DEEP: dict = {"type": "object"}
for _ in range(900):
    DEEP = {"type": "object", "properties": {"x": DEEP}}


def test_required_and_named_choices_constrain_with_a_grammar_auto_does_not():
    required = parse_chat({"messages": MSGS, "tools": [WEATHER, ADD], "tool_choice": "required"})
    assert required.params.structured["kind"] == "lark" and required.params.structured["param"] == "tool_choice"
    assert "get_weather" in required.params.structured["value"] and "add" in required.params.structured["value"]
    named = parse_chat(
        {"messages": MSGS, "tools": [WEATHER, ADD], "tool_choice": {"type": "function", "function": {"name": "add"}}}
    )
    assert '"add"' in named.params.structured["value"] and "get_weather" not in named.params.structured["value"]
    assert parse_chat({"messages": MSGS, "tools": [WEATHER]}).params.structured is None  # auto: the model decides
    assert parse_chat({"messages": MSGS, "tools": [WEATHER], "tool_choice": "none"}).tools.active is False


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0]"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": "required", "guided_regex": "a"}, "tool_choice"),
        ({"functions": [{"name": "x"}]}, "functions"),
        (  # parameters nested past what the grammar builder recurses through
            {
                "tools": [{"type": "function", "function": {"name": "deep", "parameters": DEEP}}],
                "tool_choice": "required",
            },
            "tools",
        ),
    ],
)
def test_bad_tools_are_refused_naming_the_field(extra, param):
    with pytest.raises(ApiError) as err:
        parse_chat({"messages": MSGS, **extra})
    assert err.value.status == 400 and err.value.param == param


def test_calls_are_read_out_of_a_reply_and_unknown_or_broken_ones_stay_text():
    request = ToolRequest([WEATHER, ADD])
    text = 'Sure.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    content, calls = parse_tool_calls(text, request)
    assert content == "Sure." and [c.name for c in calls] == ["get_weather", "add"]
    assert json.loads(calls[0].arguments) == {"city": "Paris"} and calls[0].id.startswith("call_")
    assert parse_tool_calls('<tool_call>{"name": "rm -rf", "arguments": {}}</tool_call>', request)[1] == []
    assert parse_tool_calls("<tool_call>not json</tool_call>", request)[1] == []
    assert parse_tool_calls(HermesToolParser().call_text("add", {"a": 2}), request)[1][0].arguments == '{"a": 2}'


def test_earlier_turns_calls_and_tool_results_are_accepted_back():
    inp = parse_chat(
        {
            "messages": [
                *MSGS,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
            ],
            "tools": [WEATHER],
        }
    )
    # kept as the templates take them: arguments an object, the result naming its call
    assert inp.messages[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    assert inp.messages[2] == {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1", "name": "get_weather"}


def test_a_stream_shows_content_but_never_the_start_of_a_call():
    held = CallHoldback(HermesToolParser())
    pieces = ["Let me ", "check. <tool", '_call>{"name"', ': "x"}</tool_call>']
    # blanks wait too: a call may follow them, and a reply's content is trimmed around its calls
    assert [held.add(0, piece) for piece in pieces] == ["Let me", " check.", "", ""] and held.calling == {0}
    held = CallHoldback(HermesToolParser())
    assert held.add(0, "a <to") == "a" and held.rest(0) == " <to"
    assert held.add(0, "y box") == " <toy box" and held.rest(0) == ""  # not a call after all


def test_a_stream_holds_a_call_that_turns_out_malformed_and_sends_it_as_content_at_the_end():
    held = CallHoldback(HermesToolParser())
    assert held.add(1, "ok <tool_call>{broken") == "ok" and held.rest(1) == " <tool_call>{broken"


def test_a_llama3_stream_holds_a_reply_that_opens_as_json_and_shows_one_that_does_not():
    held = CallHoldback(Llama3JsonToolParser())
    assert held.add(0, "  ") == "" and held.add(0, '{"name"') == "" and held.calling == {0}
    held = CallHoldback(Llama3JsonToolParser())
    assert held.add(0, "<|py") == "" and held.add(0, "thon_tag|>{") == "" and held.calling == {0}
    held = CallHoldback(Llama3JsonToolParser())
    assert held.add(0, "Paris is ") == "Paris is" and held.add(0, "{sunny}") == " {sunny}" and not held.calling


def test_an_earlier_turns_calls_are_written_back_in_the_served_models_format(smollm_tokenizer):
    """The embedded model's template writes no calls: they go into the assistant's content, in the
    served format, and the result stays a `tool` turn (its template has the role)."""
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}],
    }
    result = {"role": "tool", "tool_call_id": "c", "content": "Sunny."}
    inp = parse_chat({"messages": [*MSGS, assistant, result], "tools": [WEATHER]}, tool_parser=Llama3JsonToolParser())
    prompt = render_request(smollm_tokenizer, inp.messages, inp.tools)
    written = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert json.loads(written) == {"name": "get_weather", "parameters": {"city": "Rome"}}
    assert "<|im_start|>tool\nSunny.<|im_end|>" in prompt
    assert isinstance(inp.tools.parser, Llama3JsonToolParser)
    with pytest.raises(ApiError) as err:  # arguments must be an object
        parse_chat({"messages": [*MSGS, {**assistant, "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})
    assert err.value.param == "messages[1].tool_calls"


def test_a_stream_holds_a_near_miss_call_and_releases_json_that_turned_out_content():
    parser = HermesToolParser()
    held = CallHoldback(parser)
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    pieces = ["Sure.", "\n\n```", "json\n", call[:20], call[20:], "\n```"]
    assert "".join(held.add(0, piece) for piece in pieces) == "Sure."  # the fence and the blanks before it wait
    assert held.rest(0) == "\n\n```json\n" + call + "\n```"
    held = CallHoldback(parser)
    shown = [held.add(0, piece) for piece in ['{"a": ', "1}", " is the object."]]
    assert shown == ["", "", '{"a": 1} is the object.'] and held.rest(0) == ""  # finished JSON with text after: content
    held = CallHoldback(parser)
    assert held.add(0, "Use {braces} freely") == "Use {braces} freely"  # not JSON at all: shown at once


def test_content_held_behind_a_call_is_sent_with_it():
    held = CallHoldback(HermesToolParser())
    reply = 'Let me look. <tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call> Then I answer.'
    assert held.add(0, reply[:20]) == "Let me look." and held.add(0, reply[20:]) == ""
    content, calls = parse_tool_calls(reply, ToolRequest([ADD], "auto"))
    assert calls and held.unshown(0, content).strip() == "Then I answer."
