"""What agent clients send to Anthropic's Messages API and expect back, through the real engine
(the tiny model, in process): tool input streamed as `input_json_delta` events, `tool_choice`
`auto` / `any` / `tool` / `none`, `disable_parallel_tool_use`, `output_config.format` (and the
beta's `output_format`), and image or document blocks refused in Anthropic's error shape.

Where a test needs the reply to be a given call, `output_config.format` holds the reply to that
exact JSON (a `const` schema): under tool_choice auto the reply is read for calls as any reply is
(the parsers read a bare call object, or a list of them), so what the request's tool settings make
of the same reply is what the test sees."""

import json

import jsonschema
import pytest

from inference.models import GenerationRequest
from tests.support.asgi import post
from tests.support.sse import read_named_stream

pytestmark = pytest.mark.django_db(transaction=True)


def tool(name: str, key: str) -> dict:
    return {
        "name": name,
        "description": f"The {name.removeprefix('get_')} of a {key}.",
        "input_schema": {
            "type": "object",
            "properties": {key: {"type": "string", "maxLength": 12}},
            "required": [key],
            "additionalProperties": False,
        },
    }


WEATHER, TIME = tool("get_weather", "city"), tool("get_time", "zone")
CALL = {"name": "get_weather", "arguments": {"city": "Oslo"}}
CALLS = [CALL, {"name": "get_time", "arguments": {"zone": "CET"}}]
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


def request(engine_client, **fields) -> dict:
    return {"model": engine_client.engine.model_name, "max_tokens": 80, "messages": ASK, "temperature": 0, **fields}


def replying(value) -> dict:
    return {"format": {"type": "json_schema", "schema": {"const": value}}}


async def message(async_client, engine_client, **fields) -> dict:
    resp = await post(async_client, "/v1/messages", request(engine_client, **fields))
    assert resp.status_code == 200, resp.content
    return resp.json()


def tool_uses(reply: dict) -> list[tuple[str, dict]]:
    return [(block["name"], block["input"]) for block in reply["content"] if block["type"] == "tool_use"]


def assert_anthropic_400(resp, *words: str) -> str:
    assert resp.status_code == 400, resp.content
    body = resp.json()
    assert body == {"type": "error", "error": {"type": "invalid_request_error", "message": body["error"]["message"]}}
    assert all(word in body["error"]["message"] for word in words), body
    return body["error"]["message"]


# ---- streamed tool input -------------------------------------------------------------------------


async def test_a_streamed_tool_use_opens_empty_sends_input_json_deltas_and_stops(async_client, engine_client):
    fields = {"tools": [WEATHER, TIME], "tool_choice": {"type": "auto"}, "output_config": replying(CALLS)}
    whole = await message(async_client, engine_client, **fields)
    assert tool_uses(whole) == [(c["name"], c["arguments"]) for c in CALLS]
    events = await read_named_stream(await post(async_client, "/v1/messages", request(engine_client, stream=True, **fields)))
    for name, arguments in tool_uses(whole):
        [(at, start)] = [
            (i, p)
            for i, (kind, p) in enumerate(events)
            if kind == "content_block_start" and p["content_block"].get("name") == name
        ]
        block = start["content_block"]
        assert block["type"] == "tool_use" and block["input"] == {} and block["id"].startswith("toolu_")
        index, pieces = start["index"], []
        for kind, payload in events[at + 1 :]:  # the block's deltas, then its stop
            if kind == "content_block_stop":
                assert payload == {"type": "content_block_stop", "index": index}
                break
            assert kind == "content_block_delta" and payload["index"] == index
            assert payload["delta"]["type"] == "input_json_delta"
            pieces.append(payload["delta"]["partial_json"])
        assert len(pieces) > 1 and json.loads("".join(pieces)) == arguments  # chunks that join to the input
    assert [name for name, _ in events[-2:]] == ["message_delta", "message_stop"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


# ---- tool_choice ----------------------------------------------------------------------------------


async def test_tool_choice_auto_reads_a_call_and_none_leaves_it_text_with_the_tools_still_shown(async_client, engine_client):
    fields = {"tools": [WEATHER], "output_config": replying(CALL)}
    auto = await message(async_client, engine_client, **fields, tool_choice={"type": "auto"})
    assert tool_uses(auto) == [("get_weather", {"city": "Oslo"})] and auto["stop_reason"] == "tool_use"
    none = await message(async_client, engine_client, **fields, tool_choice={"type": "none"})
    assert none["stop_reason"] == "end_turn" and [block["type"] for block in none["content"]] == ["text"]
    assert json.loads(none["content"][0]["text"]) == CALL
    prompt = (await GenerationRequest.objects.aget(id=none["id"])).prompt
    assert "get_weather" in prompt and WEATHER["description"] in prompt  # the model still sees the tool
    streamed = await read_named_stream(
        await post(async_client, "/v1/messages", request(engine_client, stream=True, **fields, tool_choice={"type": "none"}))
    )
    deltas = [p["delta"] for name, p in streamed if name == "content_block_delta"]
    assert all(d["type"] == "text_delta" for d in deltas) and json.loads("".join(d["text"] for d in deltas)) == CALL


@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_time"}])
async def test_any_and_a_named_tool_force_a_call_whose_input_validates(async_client, engine_client, tool_choice):
    reply = await message(async_client, engine_client, tools=[WEATHER, TIME], tool_choice=tool_choice)
    assert reply["stop_reason"] == "tool_use"
    for name, arguments in tool_uses(reply):
        assert name in ("get_weather", "get_time") and (tool_choice["type"] == "any" or name == "get_time")
        jsonschema.validate(arguments, (WEATHER if name == "get_weather" else TIME)["input_schema"])


@pytest.mark.parametrize(
    "tool_choice, words",
    [
        ({"type": "tool"}, ["tool_choice.name"]),
        ({"type": "tool", "name": "get_nothing"}, ["tool_choice"]),
        ({"type": "sometimes"}, ["tool_choice.type"]),
    ],
)
async def test_a_bad_tool_choice_is_anthropics_400(async_client, engine_client, tool_choice, words):
    resp = await post(async_client, "/v1/messages", request(engine_client, tools=[WEATHER], tool_choice=tool_choice))
    assert_anthropic_400(resp, *words)


async def test_disable_parallel_tool_use_keeps_one_call(async_client, engine_client):
    """Under auto the two calls the reply holds are both read; with disable_parallel_tool_use the
    first only. Under any, the call is forced as one."""
    fields = {"tools": [WEATHER, TIME], "output_config": replying(CALLS)}
    both = await message(async_client, engine_client, **fields, tool_choice={"type": "auto"})
    assert len(tool_uses(both)) == 2
    one = await message(async_client, engine_client, **fields, tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert tool_uses(one) == [("get_weather", {"city": "Oslo"})] and one["stop_reason"] == "tool_use"
    for seed in range(3):
        forced = await message(
            async_client,
            engine_client,
            tools=[WEATHER, TIME],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            temperature=1,
            top_k=40,
            seed=seed,
        )
        assert len(tool_uses(forced)) == 1, forced["content"]


# ---- output_config.format ---------------------------------------------------------------------------


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("field", ["output_config", "output_format"])
async def test_a_reply_matches_the_output_format_schema(async_client, engine_client, field):
    """output_config.format, the current API's name; output_format, the structured-outputs beta's
    (older clients send it), read as the same."""
    form = {"type": "json_schema", "schema": SCHEMA}
    value = {"format": form} if field == "output_config" else form
    reply = await message(async_client, engine_client, max_tokens=120, **{field: value})
    [block] = reply["content"]
    assert block["type"] == "text" and reply["stop_reason"] == "end_turn", reply
    jsonschema.validate(json.loads(block["text"]), SCHEMA)


async def test_output_config_and_output_format_together_are_a_400(async_client, engine_client):
    form = {"type": "json_schema", "schema": SCHEMA}
    resp = await post(async_client, "/v1/messages", request(engine_client, output_config={"format": form}, output_format=form))
    assert_anthropic_400(resp, "output_format")


# ---- images for a text model ---------------------------------------------------------------------------


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}


@pytest.mark.parametrize(
    "messages, where, kind",
    [
        ([{"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE]}], "messages.0.content.1", "image"),
        ([{"role": "user", "content": [DOCUMENT]}], "messages.0.content.0", "document"),
        (
            [
                *ASK,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [IMAGE]}]},
            ],
            "messages.2.content.0.content.0",
            "image",
        ),
    ],
)
async def test_images_and_documents_are_refused_with_a_clear_400(async_client, engine_client, messages, where, kind):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        fields = request(engine_client, messages=messages, tools=[WEATHER])
        if path.endswith("count_tokens"):
            fields = {k: v for k, v in fields.items() if k not in ("max_tokens", "temperature")}
        text = assert_anthropic_400(await post(async_client, path, fields), where, kind, "text")
        assert "text model" in text
