"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through the real engine:
reply and stream shapes, stop reasons, forced tool use, tool results in the prompt,
output_config.format, prefill, errors in Anthropic's shape, the `x-api-key` header, and the
request's history row and metrics."""

import json

import jsonschema
import pytest

from inference.models import GenerationRequest
from inference.serving.instruments import REGISTRY
from tests.support.asgi import post
from tests.support.sse import read_named_stream

pytestmark = pytest.mark.django_db(transaction=True)
ASK = [{"role": "user", "content": "Say something about the sea."}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def request(engine_client, **fields) -> dict:
    return {"model": engine_client.engine.model_name, "max_tokens": 8, "messages": ASK, "temperature": 0, **fields}


def assert_anthropic_error(resp, status: int, kind: str) -> str:
    assert resp.status_code == status, resp.content
    body = resp.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind and body["error"]["message"], body
    return body["error"]["message"]


async def test_a_whole_reply_has_anthropics_shape_and_its_history_row(async_client, engine_client):
    resp = await post(async_client, "/v1/messages", request(engine_client, ignore_eos=True))
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["id"].startswith("msg_") and body["type"] == "message" and body["role"] == "assistant"
    assert body["model"] == engine_client.engine.model_name
    [block] = body["content"]
    assert block["type"] == "text" and block["text"]
    assert body["stop_reason"] == "max_tokens" and body["stop_sequence"] is None
    usage = body["usage"]
    assert usage["output_tokens"] == 8 and usage["input_tokens"] + usage["cache_read_input_tokens"] > 0
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert row.endpoint == "messages" and row.status == "completed" and row.output_text == block["text"]
    assert row.messages == ASK and row.prompt.endswith("assistant\n")


async def test_a_stop_sequence_ends_the_reply_and_is_named(async_client, engine_client):
    first = (await post(async_client, "/v1/messages", request(engine_client, ignore_eos=True, max_tokens=12))).json()
    text = first["content"][0]["text"]
    stop = text[len(text) // 2 :][:3]
    assert stop.strip(), text
    body = (
        await post(async_client, "/v1/messages", request(engine_client, ignore_eos=True, max_tokens=12, stop_sequences=[stop]))
    ).json()
    assert body["stop_reason"] == "stop_sequence" and body["stop_sequence"] == stop
    assert text.startswith(body["content"][0]["text"]) and stop not in body["content"][0]["text"]


async def test_the_stream_sends_anthropics_events_in_order_with_the_whole_replys_text(async_client, engine_client):
    whole = (await post(async_client, "/v1/messages", request(engine_client, ignore_eos=True))).json()
    resp = await post(async_client, "/v1/messages", request(engine_client, ignore_eos=True, stream=True))
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/event-stream")
    events = await read_named_stream(resp)
    names = [name for name, _ in events]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["id"].startswith("msg_")
    deltas = [payload["delta"] for name, payload in events if name == "content_block_delta"]
    assert all(d["type"] == "text_delta" for d in deltas)
    assert "".join(d["text"] for d in deltas) == whole["content"][0]["text"]
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None} and final["usage"]["output_tokens"] == 8


@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
async def test_a_forced_tool_choice_gives_a_tool_use_block(async_client, engine_client, tool_choice):
    body = request(engine_client, max_tokens=60, tools=[WEATHER], tool_choice=tool_choice)
    reply = (await post(async_client, "/v1/messages", body)).json()
    assert reply["stop_reason"] == "tool_use", reply
    call = reply["content"][-1]
    assert call["type"] == "tool_use" and call["name"] == "get_weather" and call["id"].startswith("toolu_")
    assert isinstance(call["input"]["city"], str)
    row = await GenerationRequest.objects.aget(id=reply["id"])
    assert json.loads(json.dumps(row.choices))[0]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_a_streamed_tool_use_carries_its_input_as_json_deltas(async_client, engine_client):
    fields = request(engine_client, max_tokens=60, tools=[WEATHER], tool_choice={"type": "any"})
    whole = (await post(async_client, "/v1/messages", fields)).json()
    events = await read_named_stream(await post(async_client, "/v1/messages", {**fields, "stream": True}))
    starts = [p for name, p in events if name == "content_block_start" and p["content_block"]["type"] == "tool_use"]
    [start] = starts
    assert start["content_block"]["name"] == "get_weather" and start["content_block"]["input"] == {}
    partial = "".join(
        p["delta"]["partial_json"] for name, p in events if name == "content_block_delta" and p["index"] == start["index"]
    )
    assert json.loads(partial) == whole["content"][-1]["input"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_a_tool_result_turn_reaches_the_prompt(async_client, engine_client):
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Rain, 4 degrees"}]},
    ]
    reply = (await post(async_client, "/v1/messages", request(engine_client, messages=messages, tools=[WEATHER]))).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    assert '"city": "Oslo"' in row.prompt and "Rain, 4 degrees" in row.prompt
    assert row.prompt.index("Oslo") < row.prompt.index("Rain, 4 degrees")


@pytest.mark.parametrize("stream", [False, True])
async def test_output_config_format_makes_the_reply_match_the_schema(async_client, engine_client, stream):
    """The tiny random model writes nothing sensible: only the schema's grammar makes it JSON that validates."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    fields = request(engine_client, max_tokens=120, output_config={"format": {"type": "json_schema", "schema": schema}})
    resp = await post(async_client, "/v1/messages", {**fields, "stream": stream})
    assert resp.status_code == 200, resp.content
    if stream:
        events = await read_named_stream(resp)
        deltas = [p["delta"] for name, p in events if name == "content_block_delta"]
        assert all(d["type"] == "text_delta" for d in deltas)
        text, stop_reason = "".join(d["text"] for d in deltas), events[-2][1]["delta"]["stop_reason"]
    else:
        reply = resp.json()
        [block] = reply["content"]
        assert block["type"] == "text"
        text, stop_reason = block["text"], reply["stop_reason"]
    assert stop_reason == "end_turn", text
    jsonschema.validate(json.loads(text), schema)


async def test_a_last_assistant_message_is_a_prefill_the_reply_continues(async_client, engine_client):
    messages = [*ASK, {"role": "assistant", "content": "The sea is"}]
    reply = (await post(async_client, "/v1/messages", request(engine_client, messages=messages))).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    assert row.prompt.rstrip().endswith("The sea is")


async def test_count_tokens_counts_what_the_reply_was_prompted_with(async_client, engine_client):
    fields = request(engine_client, system="Be brief.", tools=[WEATHER])
    counted = await post(
        async_client, "/v1/messages/count_tokens", {k: v for k, v in fields.items() if k not in ("max_tokens", "temperature")}
    )
    assert counted.status_code == 200, counted.content
    usage = (await post(async_client, "/v1/messages", fields)).json()["usage"]
    assert counted.json() == {"input_tokens": usage["input_tokens"] + usage["cache_read_input_tokens"]}


@pytest.mark.parametrize(
    "change, status, kind, names",
    [
        ({"max_tokens": None}, 400, "invalid_request_error", "max_tokens"),
        ({"max_tokens": 0}, 400, "invalid_request_error", "max_tokens"),
        ({"model": None}, 400, "invalid_request_error", "model"),
        ({"model": "claude-nonexistent"}, 404, "not_found_error", "claude-nonexistent"),
        ({"temprature": 0.5}, 400, "invalid_request_error", "temprature"),
        ({"messages": []}, 400, "invalid_request_error", "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, 400, "invalid_request_error", "messages.0.role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            400,
            "invalid_request_error",
            "messages.0.content.0",
        ),
        ({"stop_sequences": [""]}, 400, "invalid_request_error", "stop_sequences"),
        ({"tool_choice": {"type": "any"}}, 400, "invalid_request_error", "tool_choice"),
        ({"tools": [{"name": "x"}]}, 400, "invalid_request_error", "input_schema"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400, "invalid_request_error", "web_search"),
        ({"thinking": {"type": "enabled"}}, 400, "invalid_request_error", "budget_tokens"),
        ({"temperature": -1}, 400, "invalid_request_error", "temperature"),
    ],
)
async def test_bad_requests_get_anthropics_error_naming_the_field(async_client, engine_client, change, status, kind, names):
    fields = {key: value for key, value in {**request(engine_client), **change}.items() if value is not None}
    message = assert_anthropic_error(await post(async_client, "/v1/messages", fields), status, kind)
    assert names in message


async def test_the_wrong_method_is_a_405_in_anthropics_shape(async_client, engine_client):
    assert_anthropic_error(await async_client.get("/v1/messages"), 405, "invalid_request_error")


async def test_the_key_is_taken_from_x_api_key(async_client, engine_client, settings):
    settings.MINIVLLM_API_KEYS = ["sk-ant-test"]
    fields = request(engine_client, max_tokens=2)
    missing = await post(async_client, "/v1/messages", fields)
    assert_anthropic_error(missing, 401, "authentication_error")
    resp = await async_client.post("/v1/messages", fields, content_type="application/json", headers={"x-api-key": "sk-ant-test"})
    assert resp.status_code == 200, resp.content
    row = await GenerationRequest.objects.aget(id=resp.json()["id"])
    assert row.api_key_label == "env:1"


async def test_metrics_count_requests_by_api(async_client, engine_client):
    def count(model: str) -> float:
        return REGISTRY.get_sample_value("minivllm:api_requests_total", {"model_name": model, "api": "messages"}) or 0.0

    model = (await post(async_client, "/v1/messages", request(engine_client, max_tokens=2))).json()["model"]
    before = count(model)
    await post(async_client, "/v1/messages", request(engine_client, max_tokens=2))
    assert count(model) == before + 1
