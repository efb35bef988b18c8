"""Anthropic's Messages API as the official `anthropic` client drives it, against a real Daphne
serving the real model: create, stream (text and tool use), count_tokens, a tool round trip,
output_config.format, and errors raised as the client's own exception types."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest

pytestmark = [pytest.mark.live, pytest.mark.real_model]
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
GREEDY = {"temperature": 0}  # the client's typed parameters no longer list sampling fields


@pytest.fixture(scope="module")
def client(default_server):
    return anthropic.Anthropic(base_url=default_server.url, api_key="unused", max_retries=0, timeout=120)


def test_create_returns_a_message_and_the_stream_the_same_text(client, served_model, default_server):
    message = client.messages.create(model=served_model, max_tokens=24, messages=ASK, extra_body=GREEDY)
    assert message.type == "message" and message.role == "assistant" and message.model == served_model
    assert message.stop_reason in ("end_turn", "max_tokens") and message.content[0].type == "text"
    assert message.usage.output_tokens > 0 and message.usage.input_tokens + message.usage.cache_read_input_tokens > 0
    with client.messages.stream(model=served_model, max_tokens=24, messages=ASK, extra_body=GREEDY) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == final.content[0].text == message.content[0].text
    assert final.stop_reason == message.stop_reason and final.usage.output_tokens == message.usage.output_tokens
    assert default_server.wait_row(message.id)["endpoint"] == "messages"


def test_count_tokens_matches_the_prompt_a_reply_used(client, served_model):
    counted = client.messages.count_tokens(model=served_model, messages=ASK, system="Answer briefly.", tools=[WEATHER])
    reply = client.messages.create(model=served_model, max_tokens=4, messages=ASK, system="Answer briefly.", tools=[WEATHER])
    assert counted.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens


def test_a_tool_round_trip_with_tool_result(client, served_model, default_server):
    first = client.messages.create(
        model=served_model, max_tokens=80, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"}, extra_body=GREEDY
    )
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"][:1]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    jsonschema.validate(call.input, WEATHER["input_schema"])
    # the answer turn goes without tools: offered them, under "auto" or even "none" (which shows
    # them, as Anthropic does), the small embedded model, greedy, writes the call again
    second = client.messages.create(
        model=served_model,
        max_tokens=40,
        extra_body=GREEDY,
        messages=[
            *ASK,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 degrees"}]},
        ],
    )
    prompt = default_server.wait_row(second.id)["prompt"]
    assert prompt.index(json.dumps(call.input)) < prompt.index("Sunny, 21 degrees")  # the result, after its call
    # greedy, the reply is deterministic: one text block ending the turn, which reads the result back
    assert second.stop_reason == "end_turn" and [block.type for block in second.content] == ["text"]
    assert "21 degrees" in second.content[0].text, second.content[0].text


def test_output_config_format_makes_the_reply_match_the_schema(client, served_model):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    reply = client.messages.create(
        model=served_model,
        max_tokens=60,
        messages=[{"role": "user", "content": "The weather in Rome: sunny. Answer as JSON."}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        extra_body=GREEDY,
    )
    assert reply.stop_reason == "end_turn" and [block.type for block in reply.content] == ["text"]
    jsonschema.validate(json.loads(reply.content[0].text), schema)


def test_messages_parse_fills_the_clients_model(client, served_model):
    """`messages.parse(output_format=...)`, as agent code asks for typed output: the client sends
    the model's schema as output_config.format and parses the reply into it."""
    from pydantic import BaseModel, Field

    class Weather(BaseModel):
        city: str = Field(max_length=40)
        sunny: bool

    reply = client.messages.parse(
        model=served_model,
        max_tokens=60,
        messages=[{"role": "user", "content": "The weather in Rome: sunny. Answer as JSON."}],
        output_format=Weather,
        extra_body=GREEDY,
    )
    assert reply.stop_reason == "end_turn" and isinstance(reply.parsed_output, Weather)


def test_a_streamed_tool_use_is_assembled_by_the_client(client, served_model):
    with client.messages.stream(
        model=served_model,
        max_tokens=80,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body={"temperature": 0},  # greedy: the assembled block is the same every run
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    call = next(block for block in final.content if block.type == "tool_use")
    jsonschema.validate(call.input, WEATHER["input_schema"])


def test_errors_are_the_clients_own_exceptions(client, served_model):
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-not-served", max_tokens=4, messages=ASK)
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=served_model, max_tokens=4, messages=ASK, extra_body={"top_p": 7})
    assert bad.value.body["error"]["type"] == "invalid_request_error" and "top_p" in bad.value.body["error"]["message"]
