"""Tools as an agent drives them, through the official `openai` client on the real model: forced
calls whose arguments validate, a streamed call reassembled by the client's helper, and a second
turn that sends the call and its result back."""

from __future__ import annotations

import json

import jsonschema
import pytest

pytestmark = [pytest.mark.live, pytest.mark.real_model]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 20}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def schema_of(name: str) -> dict:
    return next(t["function"]["parameters"] for t in (WEATHER, TIME) if t["function"]["name"] == name)


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_a_forced_choice_always_yields_a_call_whose_arguments_validate(openai_client, served_model, default_server, tool_choice):
    reply = openai_client.chat.completions.create(
        model=served_model,
        messages=ASK,
        tools=[WEATHER, TIME],
        tool_choice=tool_choice,
        max_tokens=120,
        temperature=0.7,
        seed=3,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.type == "function" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), schema_of(call.function.name))
    if isinstance(tool_choice, dict):
        assert {call.function.name for call in choice.message.tool_calls} == {"get_time"}
    row = default_server.wait_row(reply.id)  # the history has what was offered and what was called
    assert [t["function"]["name"] for t in json.loads(row["sampling_params"])["tools"]] == ["get_weather", "get_time"]
    assert json.loads(row["choices"])[0]["tool_calls"][0]["function"]["name"] == choice.message.tool_calls[0].function.name


def test_a_streamed_call_reassembles_through_the_clients_helper(openai_client, served_model):
    with openai_client.chat.completions.stream(
        model=served_model, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=120
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls[:1]
    assert final.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), schema_of("get_weather"))


def test_a_second_turn_takes_the_call_and_its_result(openai_client, served_model):
    first = openai_client.chat.completions.create(
        model=served_model, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=120
    )
    call = first.choices[0].message.tool_calls[0]
    second = openai_client.chat.completions.create(
        model=served_model,
        messages=[
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "sunny"})},
        ],
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=40,
    )
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls


def test_auto_answers_with_text_or_well_formed_calls(openai_client, served_model):
    reply = openai_client.chat.completions.create(
        model=served_model, messages=ASK, tools=[WEATHER], max_tokens=120, temperature=0.0
    )
    choice = reply.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        for call in choice.message.tool_calls:
            assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict)
    else:
        assert choice.finish_reason in ("stop", "length") and choice.message.content


# The reply Qwen2.5-Coder-1.5B gave to "What's the weather like in Paris right now, in celsius?":
# a fenced block instead of <tool_call> tags. guided_regex makes the real model write exactly that.
FENCED = 'Let me check.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n```'


@pytest.mark.parametrize("stream", [False, True])
def test_a_fenced_call_under_auto_is_a_tool_call_whole_and_streamed(openai_client, served_model, stream):
    body = {
        "model": served_model,
        "messages": ASK,
        "tools": [WEATHER, TIME],
        "max_tokens": 80,
        "temperature": 0.0,
        "extra_body": {"guided_regex": FENCED.replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")},
    }
    if stream:
        with openai_client.chat.completions.stream(**body) as events:
            reply = events.get_final_completion()
    else:
        reply = openai_client.chat.completions.create(**body)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check."
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}
