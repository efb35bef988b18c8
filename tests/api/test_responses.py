"""OpenAI's Responses API through the real engine: the response object and its typed stream,
incomplete replies, forced function calls, function_call_output in the prompt, text.format,
stored responses (retrieve, delete, input items, previous_response_id, a conversation stored once,
a broken chain, retention), ownership by API key,
input_tokens and errors."""

import datetime
import json

import pytest
from django.utils import timezone

from inference.models import GenerationRequest, StoredResponse
from tests.support.asgi import post
from tests.support.sse import read_named_stream

pytestmark = pytest.mark.django_db(transaction=True)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def request(**fields) -> dict:
    return {"input": "Tell me about the sea.", "max_output_tokens": 6, "temperature": 0, "ignore_eos": True, **fields}


async def create(async_client, **fields) -> dict:
    resp = await post(async_client, "/v1/responses", request(**fields))
    assert resp.status_code == 200, resp.content
    return resp.json()


async def test_a_response_has_openais_shape_usage_and_a_history_row(async_client, engine_client):
    body = await create(async_client, instructions="Be brief.", metadata={"run": "7"})
    assert body["id"].startswith("resp_") and body["object"] == "response" and isinstance(body["created_at"], int)
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["id"].startswith("msg_")
    [part] = message["content"]
    assert part["type"] == "output_text" and part["text"] and part["annotations"] == []
    usage = body["usage"]
    assert usage["output_tokens"] == 6 and usage["total_tokens"] == usage["input_tokens"] + 6
    assert usage["input_tokens_details"]["cached_tokens"] >= 0
    assert body["instructions"] == "Be brief." and body["metadata"] == {"run": "7"} and body["max_output_tokens"] == 6
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert row.endpoint == "responses" and row.output_text == part["text"]
    assert row.messages[0] == {"role": "system", "content": "Be brief."}


async def test_the_stream_sends_typed_events_numbered_in_order(async_client, engine_client):
    whole = await create(async_client)
    resp = await post(async_client, "/v1/responses", request(stream=True))
    events = await read_named_stream(resp)
    names = [name for name, _ in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [payload["sequence_number"] for _, payload in events] == list(range(len(events)))
    deltas = "".join(p["delta"] for name, p in events if name == "response.output_text.delta")
    assert deltas == whole["output"][0]["content"][0]["text"]
    final = events[-1][1]["response"]
    assert (
        final["status"] == "incomplete"
        and final["output"][0]["content"][0]["text"] == deltas
        and final["usage"]["output_tokens"] == 6
    )
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["id"] == final["id"]


async def test_a_required_tool_choice_gives_a_function_call_item(async_client, engine_client):
    body = await create(async_client, input="Weather in Oslo?", max_output_tokens=60, tools=[WEATHER], tool_choice="required")
    call = body["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "get_weather" and call["call_id"].startswith("call_")
    assert isinstance(json.loads(call["arguments"])["city"], str) and body["status"] == "completed"
    events = await read_named_stream(
        await post(
            async_client,
            "/v1/responses",
            request(input="Weather?", max_output_tokens=60, tools=[WEATHER], tool_choice="required", stream=True),
        )
    )
    done = [p for name, p in events if name == "response.function_call_arguments.done"]
    assert done and json.loads(done[0]["arguments"]) and done[0]["name"] == "get_weather"
    assert events[-1][0] == "response.completed"


async def test_a_function_call_output_reaches_the_prompt_after_its_call(async_client, engine_client):
    turns = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Rain, 4 degrees"},
    ]
    body = await create(async_client, input=turns, tools=[WEATHER])
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert row.messages[-1] == {"role": "tool", "content": "Rain, 4 degrees", "tool_call_id": "call_1", "name": "get_weather"}
    assert '"city": "Oslo"' in row.prompt and "Rain, 4 degrees" in row.prompt
    assert row.prompt.index('"city": "Oslo"') < row.prompt.index("Rain, 4 degrees")
    items = (await async_client.get(f"/v1/responses/{body['id']}/input_items", {"order": "asc"})).json()["data"]
    assert [item["type"] for item in items] == ["message", "function_call", "function_call_output"]
    assert items[-1]["output"] == "Rain, 4 degrees" and items[-1]["call_id"] == "call_1"
    longer = {**turns[2], "output": "Rain, 4 degrees, and wind from the north at forty knots"}
    counted = (await post(async_client, "/v1/responses/input_tokens", {"input": [*turns[:2], longer], "tools": [WEATHER]})).json()
    assert counted["input_tokens"] > body["usage"]["input_tokens"]  # the output is counted as part of the prompt


async def test_a_function_call_output_continues_a_stored_call(async_client, engine_client):
    first = await create(async_client, input="Weather in Oslo?", max_output_tokens=60, tools=[WEATHER], tool_choice="required")
    [call] = [item for item in first["output"] if item["type"] == "function_call"][:1]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "Rain, 4 degrees"}
    second = await create(async_client, input=[output], previous_response_id=first["id"], tools=[WEATHER])
    row = await GenerationRequest.objects.aget(id=second["id"])
    city = json.loads(call["arguments"])["city"]
    assert [m["role"] for m in row.messages] == ["user", "assistant", "tool"] and row.messages[2]["content"] == "Rain, 4 degrees"
    [stored] = row.messages[1]["tool_calls"]  # the call as the client answers it, under its call_id
    assert stored == {"id": call["call_id"], "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
    assert row.messages[2]["tool_call_id"] == call["call_id"] and row.messages[2]["name"] == "get_weather"
    assert row.prompt.rindex("get_weather") < row.prompt.index("Rain, 4 degrees") and json.dumps(city) in row.prompt


async def test_text_format_json_schema_constrains_the_reply(async_client, engine_client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    body = await create(
        async_client,
        max_output_tokens=20,
        ignore_eos=False,
        text={"format": {"type": "json_schema", "name": "r", "schema": schema}},
    )
    assert isinstance(json.loads(body["output"][0]["content"][0]["text"])["ok"], bool)


async def test_a_stored_response_is_retrieved_listed_continued_and_deleted(async_client, engine_client):
    first = await create(async_client, input=[{"role": "user", "content": [{"type": "input_text", "text": "My name is Ada."}]}])
    got = await async_client.get(f"/v1/responses/{first['id']}")
    assert got.status_code == 200 and got.json() == first
    items = (await async_client.get(f"/v1/responses/{first['id']}/input_items")).json()
    assert items["object"] == "list" and items["has_more"] is False
    [item] = items["data"]
    assert item["role"] == "user" and item["content"][0]["text"] == "My name is Ada." and item["id"] == items["first_id"]
    second = await create(async_client, input="What is my name?", previous_response_id=first["id"], instructions="Answer.")
    row = await GenerationRequest.objects.aget(id=second["id"])
    said = [m["content"] for m in row.messages]
    assert said[0] == "Answer." and said[1] == "My name is Ada." and said[2] == first["output"][0]["content"][0]["text"]
    assert said[3] == "What is my name?" and second["previous_response_id"] == first["id"]
    deleted = await async_client.delete(f"/v1/responses/{first['id']}")
    assert deleted.json() == {"id": first["id"], "object": "response", "deleted": True}
    assert (await async_client.get(f"/v1/responses/{first['id']}")).status_code == 404
    again = await post(async_client, "/v1/responses", request(previous_response_id=first["id"]))
    assert again.status_code == 404 and again.json()["error"]["param"] == "previous_response_id"


async def test_a_continuation_stores_its_own_turn_once_and_a_broken_chain_names_the_gap(async_client, engine_client):
    """A response keeps its turn and a link, not a copy of the conversation; deleting a turn in the
    middle breaks the chain after it (OpenAI's rule): continuing names the missing response."""
    first = await create(async_client, input="One.")
    second = await create(async_client, input="Two.", previous_response_id=first["id"])
    third = await create(async_client, input="Three.", previous_response_id=second["id"])
    row = await StoredResponse.objects.aget(id=third["id"])
    assert row.previous_id == second["id"] and [m["role"] for m in row.messages] == ["user", "assistant"]
    assert row.messages[0]["content"] == "Three."
    fourth = await create(async_client, input="Four.", previous_response_id=third["id"])
    said = [m["content"] for m in (await GenerationRequest.objects.aget(id=fourth["id"])).messages]
    assert said[0::2] == ["One.", "Two.", "Three.", "Four."]  # the conversation rebuilt along the chain
    assert (await async_client.delete(f"/v1/responses/{second['id']}")).status_code == 200
    broken = await post(async_client, "/v1/responses", request(previous_response_id=third["id"]))
    error = broken.json()["error"]
    assert broken.status_code == 404 and error["param"] == "previous_response_id" and second["id"] in error["message"]
    assert (await async_client.get(f"/v1/responses/{third['id']}")).status_code == 200  # still readable itself
    assert (await post(async_client, "/v1/responses", request(previous_response_id=first["id"]))).status_code == 200


async def test_an_expired_response_answers_as_a_missing_one(async_client, engine_client, settings):
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 30
    old = await create(async_client)
    long_ago = timezone.now() - datetime.timedelta(days=31)
    await StoredResponse.objects.filter(id=old["id"]).aupdate(created=long_ago, last_turn=long_ago)  # untouched since
    assert (await async_client.get(f"/v1/responses/{old['id']}")).status_code == 404
    assert (await async_client.get(f"/v1/responses/{old['id']}/input_items")).status_code == 404
    assert (await async_client.delete(f"/v1/responses/{old['id']}")).status_code == 404
    continued = await post(async_client, "/v1/responses", request(previous_response_id=old["id"]))
    assert continued.status_code == 404 and continued.json()["error"]["param"] == "previous_response_id"
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 0  # kept forever
    assert (await async_client.get(f"/v1/responses/{old['id']}")).status_code == 200


async def test_store_false_keeps_nothing(async_client, engine_client):
    body = await create(async_client, store=False)
    assert body["store"] is False and not await StoredResponse.objects.filter(id=body["id"]).aexists()
    assert (await async_client.get(f"/v1/responses/{body['id']}")).status_code == 404


async def test_input_items_page_with_order_limit_and_after(async_client, engine_client):
    turns = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    body = await create(async_client, input=turns)
    url = f"/v1/responses/{body['id']}/input_items"
    first = (await async_client.get(url, {"order": "asc", "limit": 2})).json()
    assert [i["content"][0]["text"] for i in first["data"]] == ["turn 0", "turn 1"] and first["has_more"] is True
    rest = (await async_client.get(url, {"order": "asc", "limit": 5, "after": first["last_id"]})).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["turn 2", "turn 3", "turn 4"] and rest["has_more"] is False
    newest = (await async_client.get(url)).json()
    assert newest["data"][0]["content"][0]["text"] == "turn 4"


async def test_a_response_belongs_to_the_key_that_made_it(async_client, engine_client, settings):
    settings.MINIVLLM_API_KEYS = ["key-a", "key-b"]
    resp = await async_client.post(
        "/v1/responses", request(), content_type="application/json", headers={"Authorization": "Bearer key-a"}
    )
    response_id = resp.json()["id"]
    mine = await async_client.get(f"/v1/responses/{response_id}", headers={"Authorization": "Bearer key-a"})
    theirs = await async_client.get(f"/v1/responses/{response_id}", headers={"Authorization": "Bearer key-b"})
    assert mine.status_code == 200 and theirs.status_code == 404
    stolen = await async_client.delete(f"/v1/responses/{response_id}", headers={"Authorization": "Bearer key-b"})
    assert stolen.status_code == 404 and await StoredResponse.objects.filter(id=response_id).aexists()


async def test_an_environment_key_keeps_its_responses_when_the_key_list_changes(async_client, engine_client, settings):
    settings.MINIVLLM_API_KEYS = ["key-a", "key-b"]
    made = await async_client.post(
        "/v1/responses", request(), content_type="application/json", headers={"Authorization": "Bearer key-a"}
    )
    response_id = made.json()["id"]
    settings.MINIVLLM_API_KEYS = ["key-c", "key-a"]  # another key now sits where key-a did
    usurper = await async_client.get(f"/v1/responses/{response_id}", headers={"Authorization": "Bearer key-c"})
    owner = await async_client.get(f"/v1/responses/{response_id}", headers={"Authorization": "Bearer key-a"})
    assert usurper.status_code == 404 and owner.status_code == 200


async def test_input_tokens_counts_the_prompt_a_response_used(async_client, engine_client):
    fields = {"input": "Count me.", "instructions": "Be brief.", "tools": [WEATHER]}
    counted = (await post(async_client, "/v1/responses/input_tokens", fields)).json()
    body = await create(async_client, **fields)
    assert counted == {"object": "response.input_tokens", "input_tokens": body["usage"]["input_tokens"]}


@pytest.mark.parametrize(
    "change, param",
    [
        ({"input": None}, "input"),
        ({"input": []}, "input"),
        ({"input": [{"type": "message", "role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"background": True}, "background"),
        ({"reasoning": {"effort": "lots"}}, "reasoning.effort"),
        ({"temprature": 1}, "temprature"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
async def test_bad_requests_are_400s_naming_the_field(async_client, engine_client, change, param):
    fields = {key: value for key, value in {**request(), **change}.items() if value is not None}
    resp = await post(async_client, "/v1/responses", fields)
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["param"] == param
