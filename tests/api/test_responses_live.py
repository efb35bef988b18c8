"""OpenAI's Responses API as the official `openai` client drives it, against a real Daphne serving
the real model: create / stream / retrieve / delete / input_items, a function tool round trip,
text.format parsed into a model, and previous_response_id across a server restart."""

from __future__ import annotations

import json

import openai
import pydantic
import pytest

pytestmark = [pytest.mark.live, pytest.mark.real_model]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


class Answer(pydantic.BaseModel):
    city: str
    sunny: bool


def test_create_and_stream_give_the_same_reply(openai_client, served_model):
    whole = openai_client.responses.create(model=served_model, input="Name a colour.", max_output_tokens=16, temperature=0)
    assert whole.status in ("completed", "incomplete") and whole.output_text
    with openai_client.responses.stream(
        model=served_model, input="Name a colour.", max_output_tokens=16, temperature=0
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_stored_response_is_retrieved_listed_and_deleted(openai_client, served_model):
    created = openai_client.responses.create(model=served_model, input="Say hi.", max_output_tokens=8)
    assert openai_client.responses.retrieve(created.id).output_text == created.output_text
    [item] = openai_client.responses.input_items.list(created.id).data
    assert item.type == "message" and item.content[0].text == "Say hi."
    openai_client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(created.id)


def test_a_function_tool_round_trip(openai_client, served_model, default_server):
    first = openai_client.responses.create(
        model=served_model,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=80,
        temperature=0,
    )
    [call] = [item for item in first.output if item.type == "function_call"][:1]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)
    # tool_choice none asks for the answer: under "auto" the small embedded model, greedy, calls again
    second = openai_client.responses.create(
        model=served_model,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees"}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=30,
        temperature=0,
    )
    prompt = default_server.wait_row(second.id)["prompt"]
    assert json.loads(call.arguments)["city"] in prompt
    assert prompt.rindex("get_weather") < prompt.index("Sunny, 21 degrees")  # the output, after its call
    # greedy, the reply is deterministic: one completed message, which reads the tool's output back
    assert second.status == "completed" and second.previous_response_id == first.id
    assert [item.type for item in second.output] == ["message"] and second.output[0].status == "completed"
    assert "21 degrees" in second.output_text, second.output_text


def test_text_format_is_parsed_into_the_clients_model(openai_client, served_model):
    # greedy: a sampled reply may spend its budget inside a string and end as JSON cut short
    parsed = openai_client.responses.parse(
        model=served_model, input="The weather in Rome: sunny.", text_format=Answer, max_output_tokens=60, temperature=0
    )
    assert isinstance(parsed.output_parsed, Answer)


def test_previous_response_id_survives_a_restart(openai_client, served_model, default_server):
    first = openai_client.responses.create(model=served_model, input="My favourite number is 7.", max_output_tokens=8)
    default_server.stop()
    default_server.start()
    second = openai_client.responses.create(
        model=served_model, input="What is my favourite number?", previous_response_id=first.id, max_output_tokens=8
    )
    row = default_server.wait_row(second.id)
    messages = json.loads(row["messages"])
    assert messages[0]["content"] == "My favourite number is 7." and messages[-1]["content"] == "What is my favourite number?"
    assert openai_client.responses.retrieve(first.id).id == first.id
