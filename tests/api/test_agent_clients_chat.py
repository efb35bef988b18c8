"""What agent clients send to Chat Completions and expect back, through the real engine (the tiny
model, in process): `tool_choice: "none"` with the tools still in the prompt and the reply never
read for calls, `strict: true` function schemas held exactly (every object closed, every property
required, as OpenAI's strict mode), and the `allowed_tools` form of tool_choice.

Where a test needs the reply to be a given call, `response_format` holds the reply to that exact
JSON (a `const` schema): under tool_choice auto the reply is then read for calls as any reply is."""

import json

import jsonschema
import pytest

from inference.api.common.tool_calls import tools_from_body
from inference.api.common.tool_parsers import HermesToolParser
from inference.models import GenerationRequest
from tests.support.asgi import post
from tests.support.sse import read_stream

pytestmark = pytest.mark.django_db(transaction=True)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
CALL = {"name": "get_weather", "arguments": {"city": "Oslo"}}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]
# Optional properties, objects left open: strict mode closes every object and requires every key.
LOOSE = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "where": {"type": "object", "properties": {"lat": {"type": "integer"}, "lon": {"type": "integer"}}},
    },
    "required": ["city"],
}
STRICT = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "where": {
            "type": "object",
            "properties": {"lat": {"type": "integer"}, "lon": {"type": "integer"}},
            "required": ["lat", "lon"],
            "additionalProperties": False,
        },
    },
    "required": ["city", "unit", "where"],
    "additionalProperties": False,
}


def strict_tool(parameters: dict) -> dict:
    return {"type": "function", "function": {"name": "get_weather", "parameters": parameters, "strict": True}}


def request(engine_client, **fields) -> dict:
    return {"model": engine_client.engine.model_name, "messages": ASK, "max_tokens": 80, "temperature": 0, **fields}


def replying(value) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": {"const": value}}}


async def chat(async_client, engine_client, **fields) -> dict:
    resp = await post(async_client, "/v1/chat/completions", request(engine_client, **fields))
    assert resp.status_code == 200, resp.content
    return resp.json()


# ---- tool_choice none ------------------------------------------------------------------------------


async def test_tool_choice_none_shows_the_tools_and_never_reads_a_call(async_client, engine_client):
    fields = {"tools": [WEATHER], "response_format": replying(CALL)}
    auto = await chat(async_client, engine_client, **fields)  # the control: the same reply under auto is a call
    [call] = auto["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and auto["choices"][0]["finish_reason"] == "tool_calls"
    none = await chat(async_client, engine_client, **fields, tool_choice="none")
    [choice] = none["choices"]
    assert choice["finish_reason"] == "stop" and not choice["message"].get("tool_calls")
    assert json.loads(choice["message"]["content"]) == CALL
    row = await GenerationRequest.objects.aget(id=none["id"])
    assert "get_weather" in row.prompt and "The current weather in a city." in row.prompt  # the tools were rendered
    assert row.choices[0].get("tool_calls") is None
    resp = await post(async_client, "/v1/chat/completions", request(engine_client, stream=True, tool_choice="none", **fields))
    chunks = [e for e in await read_stream(resp) if isinstance(e, dict) and e.get("choices")]
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks)
    assert json.loads("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)) == CALL


async def test_tool_choice_none_and_auto_prompts_differ_only_in_what_they_ask(async_client, engine_client):
    """The same tools in both prompts; under none the model is asked not to call them (the generic
    prompt of a template without a tools section: the embedded model's)."""
    auto = await chat(async_client, engine_client, tools=[WEATHER], max_tokens=2)
    none = await chat(async_client, engine_client, tools=[WEATHER], tool_choice="none", max_tokens=2)
    without = await chat(async_client, engine_client, max_tokens=2)
    prompts = [(await GenerationRequest.objects.aget(id=body["id"])).prompt for body in (auto, none, without)]
    described = json.dumps(WEATHER["function"])
    assert described in prompts[0] and described in prompts[1] and described not in prompts[2]
    assert "<tool_call>" in prompts[0] and "Do not call any of them" in prompts[1]


# ---- strict: true ------------------------------------------------------------------------------------


async def test_a_strict_function_is_called_with_exactly_its_schema(async_client, engine_client):
    """Sampled freely (temperature 1), the tiny random model fills whatever the grammar allows: under
    strict every call has every property, nested ones too, and no others."""
    for seed in range(4):
        body = await chat(
            async_client, engine_client, tools=[strict_tool(LOOSE)], tool_choice="required", temperature=1, seed=seed
        )
        [call] = body["choices"][0]["message"]["tool_calls"]
        jsonschema.validate(json.loads(call["function"]["arguments"]), STRICT)


def test_strict_holds_the_auto_trigger_and_the_named_grammar_to_the_strict_schema():
    strict = tools_from_body({"tools": [strict_tool(LOOSE)]}, HermesToolParser())
    [function] = strict.functions
    assert function["parameters"] == STRICT and function["strict"] is True
    loose = tools_from_body(
        {"tools": [{**strict_tool(LOOSE), "function": {"name": "get_weather", "parameters": LOOSE}}]}, HermesToolParser()
    )
    assert loose.functions[0]["parameters"] == LOOSE
    required = '"required": ["city", "unit", "where"]'
    assert required in strict.trigger()["grammar"]["value"] and required not in loose.trigger()["grammar"]["value"]
    named = tools_from_body(
        {"tools": [strict_tool(LOOSE)], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        HermesToolParser(),
    )
    assert required in named.grammar()
    # a near miss is read against the strict schema: arguments lacking a property are no call
    content, calls = strict.read_calls(json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}}))
    assert calls == [] and content
    assert strict.tools[0]["function"]["parameters"] == LOOSE  # the prompt shows the schema as sent


@pytest.mark.parametrize(
    "parameters",
    [
        {**LOOSE, "additionalProperties": True},
        {"type": "object", "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}}},
    ],
)
async def test_a_strict_schema_that_allows_other_properties_is_a_400(async_client, engine_client, parameters):
    resp = await post(async_client, "/v1/chat/completions", request(engine_client, tools=[strict_tool(parameters)]))
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["param"] == "tools[0].function.parameters" and "additionalProperties" in error["message"]


async def test_strict_reaches_the_responses_and_messages_apis_too(async_client, engine_client):
    tool = {"type": "function", "name": "get_weather", "parameters": LOOSE, "strict": True}
    fields = {
        "input": "Weather?",
        "max_output_tokens": 80,
        "temperature": 1,
        "seed": 3,
        "tools": [tool],
        "tool_choice": "required",
    }
    resp = await post(async_client, "/v1/responses", fields)
    [call] = [item for item in resp.json()["output"] if item["type"] == "function_call"]
    jsonschema.validate(json.loads(call["arguments"]), STRICT)
    anthropic = {"name": "get_weather", "input_schema": LOOSE, "strict": True}
    resp = await post(
        async_client,
        "/v1/messages",
        {**request(engine_client, temperature=1, seed=3), "tools": [anthropic], "tool_choice": {"type": "any"}},
    )
    [block] = [block for block in resp.json()["content"] if block["type"] == "tool_use"]
    jsonschema.validate(block["input"], STRICT)


# ---- allowed_tools ---------------------------------------------------------------------------------


async def test_allowed_tools_forces_a_call_among_the_allowed_and_shows_every_tool(async_client, engine_client):
    time = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]},
    }
    body = await chat(async_client, engine_client, tools=[WEATHER, time], tool_choice=allowed)
    [call] = body["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_time"
    assert "get_weather" in (await GenerationRequest.objects.aget(id=body["id"])).prompt
    bad = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "x"}}]},
    }
    resp = await post(async_client, "/v1/chat/completions", request(engine_client, tools=[WEATHER], tool_choice=bad))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "tool_choice"
