"""What agent clients send to the Responses API and expect back, through the real engine (the tiny
model, in process): logprobs through `include`, `parallel_tool_calls`, `max_tool_calls`,
`tool_choice` as an object (a named function, `allowed_tools`), `instructions` beside
`previous_response_id`, function-call outputs in the rendered prompt, `truncation: "auto"`.

Where a test needs the reply to be a given call, `text.format` holds the reply to that exact JSON
(a `const` schema): under tool_choice auto the reply is then read for calls as any reply is (the
parsers read a bare call object, or a list of them), so what the request's tool settings make of
the same reply is what the test sees."""

import json

import pytest

from inference.models import GenerationRequest
from tests.support.asgi import post
from tests.support.sse import read_named_stream

pytestmark = pytest.mark.django_db(transaction=True)


def function(name: str, key: str) -> dict:
    return {
        "type": "function",
        "name": name,
        "description": f"The {name.removeprefix('get_')} of a {key}.",
        "parameters": {
            "type": "object",
            "properties": {key: {"type": "string", "maxLength": 12}},
            "required": [key],
            "additionalProperties": False,
        },
    }


WEATHER, TIME = function("get_weather", "city"), function("get_time", "zone")
CALLS = [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {"zone": "CET"}}]


def request(**fields) -> dict:
    return {"input": "Tell me about the sea.", "max_output_tokens": 6, "temperature": 0, "ignore_eos": True, **fields}


def replying(value) -> dict:
    """text.format holding the reply to exactly `value`'s JSON."""
    return {"format": {"type": "json_schema", "name": "reply", "schema": {"const": value}}}


async def create(async_client, **fields) -> dict:
    resp = await post(async_client, "/v1/responses", request(**fields))
    assert resp.status_code == 200, resp.content
    return resp.json()


def calls_of(body: dict) -> list[tuple[str, dict]]:
    return [(item["name"], json.loads(item["arguments"])) for item in body["output"] if item["type"] == "function_call"]


# ---- logprobs through include ----------------------------------------------------------------


async def test_include_output_text_logprobs_gives_each_tokens_logprob_and_top_alternatives(async_client, engine_client):
    fields = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    body = await create(async_client, **fields)
    [part] = body["output"][0]["content"]
    logprobs = part["logprobs"]
    assert len(logprobs) == body["usage"]["output_tokens"] == 6
    assert "".join(item["token"] for item in logprobs) == part["text"]
    for item in logprobs:
        assert item["logprob"] <= 0 and item["bytes"] == list(item["token"].encode())
        assert len(item["top_logprobs"]) == 2 and all(top["logprob"] <= 0 for top in item["top_logprobs"])
        assert item["top_logprobs"][0]["token"] == item["token"]  # greedy: the chosen token is the likeliest
    assert body["top_logprobs"] == 2
    # streamed, the deltas carry the same tokens, and the done events the whole list
    events = await read_named_stream(await post(async_client, "/v1/responses", request(stream=True, **fields)))
    streamed = [item for name, p in events if name == "response.output_text.delta" for item in p["logprobs"]]
    assert streamed == logprobs
    [done] = [p for name, p in events if name == "response.output_text.done"]
    assert done["logprobs"] == logprobs
    assert events[-1][1]["response"]["output"][0]["content"][0]["logprobs"] == logprobs
    # without include: none, though top_logprobs is set (as OpenAI and vLLM read it)
    plain = await create(async_client, top_logprobs=2)
    assert plain["output"][0]["content"][0]["logprobs"] == []


@pytest.mark.parametrize(
    "change, param",
    [
        ({"include": ["message.output_text.logprobs"], "top_logprobs": 50}, "top_logprobs"),
        ({"include": ["everything"]}, "include"),
        ({"include": "message.output_text.logprobs"}, "include"),
    ],
)
async def test_bad_logprobs_requests_name_the_field(async_client, engine_client, change, param):
    resp = await post(async_client, "/v1/responses", request(**change))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.content


async def test_include_names_outputs_this_server_never_makes_and_adds_nothing(async_client, engine_client):
    """The Agents SDK sends include ["reasoning.encrypted_content"] with store false."""
    body = await create(async_client, include=["reasoning.encrypted_content"], store=False)
    assert body["status"] == "incomplete" and body["output"][0]["content"][0]["logprobs"] == []


# ---- parallel_tool_calls, max_tool_calls ------------------------------------------------------


async def test_parallel_tool_calls_and_max_tool_calls_cap_the_calls_read(async_client, engine_client):
    """The reply is the two calls as a list; auto reads both; parallel_tool_calls false, or
    max_tool_calls 1, keeps the first (further calls are ignored, as OpenAI says); max_tool_calls 0
    reads none, and the reply stays text."""
    fields = {"input": "Weather in Oslo and the time?", "max_output_tokens": 80, "ignore_eos": False}
    fields |= {"tools": [WEATHER, TIME], "text": replying(CALLS)}
    both = await create(async_client, **fields)
    assert calls_of(both) == [(c["name"], c["arguments"]) for c in CALLS] and both["parallel_tool_calls"] is True
    one = await create(async_client, **fields, parallel_tool_calls=False)
    assert calls_of(one) == [("get_weather", {"city": "Oslo"})] and one["parallel_tool_calls"] is False
    capped = await create(async_client, **fields, max_tool_calls=1)
    assert calls_of(capped) == [("get_weather", {"city": "Oslo"})] and capped["max_tool_calls"] == 1
    none = await create(async_client, **fields, max_tool_calls=0)
    assert calls_of(none) == [] and json.loads(none["output"][0]["content"][0]["text"]) == CALLS


async def test_a_forced_call_without_parallel_calls_is_one_call(async_client, engine_client):
    fields = {"input": "Weather and time?", "max_output_tokens": 80, "ignore_eos": False, "tools": [WEATHER, TIME]}
    for seed in range(3):
        body = await create(async_client, **fields, tool_choice="required", parallel_tool_calls=False, temperature=1, seed=seed)
        assert len(calls_of(body)) == 1, body["output"]
    capped = await create(async_client, **fields, tool_choice="required", max_tool_calls=1, temperature=1, seed=0)
    assert len(calls_of(capped)) == 1


@pytest.mark.parametrize(
    "change, param",
    [
        ({"max_tool_calls": -1}, "max_tool_calls"),
        ({"max_tool_calls": 0, "tool_choice": "required"}, "max_tool_calls"),
    ],
)
async def test_bad_max_tool_calls_are_400s(async_client, engine_client, change, param):
    resp = await post(async_client, "/v1/responses", request(tools=[WEATHER], **change))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.content


# ---- tool_choice as an object ------------------------------------------------------------------


async def test_a_named_function_choice_calls_that_function(async_client, engine_client):
    fields = {"input": "What time is it?", "max_output_tokens": 60, "ignore_eos": False, "tools": [WEATHER, TIME]}
    body = await create(async_client, **fields, tool_choice={"type": "function", "name": "get_time"})
    [(name, arguments)] = calls_of(body)
    assert name == "get_time" and isinstance(arguments["zone"], str)
    assert body["tool_choice"] == {"type": "function", "name": "get_time"}


async def test_allowed_tools_narrows_the_calls_while_every_tool_stays_in_the_prompt(async_client, engine_client):
    fields = {"input": "What time is it?", "max_output_tokens": 60, "ignore_eos": False, "tools": [WEATHER, TIME]}
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}
    body = await create(async_client, **fields, tool_choice=allowed)
    [(name, _)] = calls_of(body)
    assert name == "get_time"
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert "get_weather" in row.prompt and "get_time" in row.prompt
    # mode auto: a call to a function allowed_tools leaves out is not read as a call
    auto = {**allowed, "mode": "auto"}
    body = await create(async_client, **fields, tool_choice=auto, text=replying(CALLS[0]))
    assert calls_of(body) == [] and json.loads(body["output"][0]["content"][0]["text"]) == CALLS[0]


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "name": "get_nothing"},
        {"type": "function"},
        {"type": "file_search"},
        {"type": "allowed_tools", "mode": "sometimes", "tools": [{"type": "function", "name": "get_time"}]},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_nothing"}]},
    ],
)
async def test_a_tool_choice_object_that_names_nothing_offered_is_a_400(async_client, engine_client, choice):
    resp = await post(async_client, "/v1/responses", request(tools=[WEATHER, TIME], tool_choice=choice))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "tool_choice", resp.content


# ---- instructions with previous_response_id ------------------------------------------------------


async def test_instructions_apply_to_their_own_response_only(async_client, engine_client):
    """OpenAI: the previous response's instructions are not carried over; this request's apply."""
    first = await create(async_client, input="My name is Ada.", instructions="Answer in French.")
    second = await create(async_client, input="My name?", previous_response_id=first["id"], instructions="Answer in German.")
    prompt = (await GenerationRequest.objects.aget(id=second["id"])).prompt
    assert "Answer in German." in prompt and "French" not in prompt and "My name is Ada." in prompt
    assert second["instructions"] == "Answer in German."
    third = await create(async_client, input="Again?", previous_response_id=second["id"])
    prompt = (await GenerationRequest.objects.aget(id=third["id"])).prompt
    assert "German" not in prompt and "French" not in prompt and "My name is Ada." in prompt and "My name?" in prompt
    assert third["instructions"] is None


# ---- function_call_output in the prompt -----------------------------------------------------------


async def test_function_call_outputs_are_rendered_as_tool_turns_after_their_calls(async_client, engine_client):
    turns = [
        {"role": "user", "content": "Weather in Oslo and the time there?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": '{"zone": "CET"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Rain, 4 degrees"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "14:05"}]},
    ]
    body = await create(async_client, input=turns, tools=[WEATHER, TIME])
    prompt = (await GenerationRequest.objects.aget(id=body["id"])).prompt
    calls = (
        '<|im_start|>assistant\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call><|im_end|>\n'
    )
    outputs = "<|im_start|>tool\nRain, 4 degrees<|im_end|>\n<|im_start|>tool\n14:05<|im_end|>\n<|im_start|>assistant\n"
    assert prompt.endswith(calls + outputs), prompt


# ---- truncation -------------------------------------------------------------------------------------


def long_conversation(turns: int) -> list[dict]:
    filler = " ".join(["the waves roll in and out along the shore"] * 6)
    said = []
    for number in range(turns):
        said.append({"role": "user", "content": f"Question {number}: {filler}"})
        said.append({"role": "assistant", "content": f"Answer {number}: {filler}"})
    return said + [{"role": "user", "content": "Last question: what did we say?"}]


async def test_truncation_auto_drops_the_oldest_turns_to_fit_and_disabled_refuses(async_client, engine_client):
    conversation = long_conversation(8)  # well past the tiny model's 512-token context
    fields = {"input": conversation, "instructions": "Be brief.", "max_output_tokens": 16}
    refused = await post(async_client, "/v1/responses", request(**fields))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded", refused.content
    refused = await post(async_client, "/v1/responses", request(**fields, truncation="disabled"))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    body = await create(async_client, **fields, truncation="auto")
    assert body["truncation"] == "auto" and body["usage"]["output_tokens"] == 16
    limit = engine_client.model_info.token_limit
    assert body["usage"]["input_tokens"] + 16 <= limit
    prompt = (await GenerationRequest.objects.aget(id=body["id"])).prompt
    assert "Be brief." in prompt and "Last question" in prompt  # the instructions and the newest turn stay
    assert "Question 0:" not in prompt and "Answer 0:" not in prompt  # the oldest went
    assert "Answer 7:" in prompt  # only as many as needed went
    # input_tokens counts the prompt as truncation would cut it
    counted = await post(async_client, "/v1/responses/input_tokens", {"input": conversation, "truncation": "auto"})
    assert counted.status_code == 200 and counted.json()["input_tokens"] < limit
    bad = await post(async_client, "/v1/responses", request(truncation="sometimes"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncation"
