"""OpenAI's Responses API as the official `openai` client drives it, against a real Daphne serving
the real model: create / stream / retrieve / delete / input_items, a function tool round trip,
text.format parsed into a model, previous_response_id across a server restart, and a chain broken
where a turn was deleted."""

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
    # the answer turn goes without tools (as the Agents SDK's is_enabled does): offered them, under
    # "auto" or even "none" (which shows them, as OpenAI does), the small embedded model calls again
    second = openai_client.responses.create(
        model=served_model,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees"}],
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


def test_logprobs_through_include_reach_the_clients_types(openai_client, served_model):
    kwargs = dict(model=served_model, input="Say hi.", max_output_tokens=6, temperature=0)
    kwargs |= dict(include=["message.output_text.logprobs"], top_logprobs=2)
    response = openai_client.responses.create(**kwargs)
    part = response.output[0].content[0]
    assert len(part.logprobs) == response.usage.output_tokens and "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in part.logprobs)
    with openai_client.responses.stream(**kwargs) as stream:
        deltas = [lp for event in stream if event.type == "response.output_text.delta" for lp in event.logprobs]
    assert [lp.token for lp in deltas] == [lp.token for lp in part.logprobs]


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


def test_a_chain_continues_turn_by_turn_and_breaks_where_a_turn_was_deleted(openai_client, served_model, default_server):
    """Each response stores its own turn; the conversation is rebuilt along previous_response_id,
    and deleting a turn in the middle breaks the chain after it (OpenAI's rule): a clear 404."""
    first = openai_client.responses.create(model=served_model, input="My name is Ada.", max_output_tokens=4)
    second = openai_client.responses.create(
        model=served_model, input="I live in Oslo.", previous_response_id=first.id, max_output_tokens=4
    )
    third = openai_client.responses.create(
        model=served_model, input="Where do I live?", previous_response_id=second.id, max_output_tokens=4
    )
    said = [message["content"] for message in json.loads(default_server.wait_row(third.id)["messages"])]
    assert said[0] == "My name is Ada." and said[2] == "I live in Oslo." and said[-1] == "Where do I live?"
    openai_client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError, match=second.id):
        openai_client.responses.create(
            model=served_model, input="And my name?", previous_response_id=third.id, max_output_tokens=4
        )
    assert openai_client.responses.retrieve(third.id).id == third.id
