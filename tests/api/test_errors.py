"""Bad inputs: each gets its status code and OpenAI's error JSON, never a 500 or a trace."""

import json

import pytest

from inference.models import GenerationRequest

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"
GEN = "/generate"
MSGS = [{"role": "user", "content": "Hi"}]

# (path, raw body or JSON-able body, status, param)
CASES = [
    # the body itself
    (GEN, b"{not json", 400, None),
    (GEN, b"\xff\xfe{}", 400, None),
    (GEN, b"", 400, None),
    (GEN, b"[1, 2]", 400, None),
    (GEN, b'{"prompt": "x", "temperature": NaN}', 400, None),
    (CHAT, b'"just a string"', 400, None),
    # /generate
    (GEN, {}, 400, "prompt"),
    (GEN, {"prompt": 42}, 400, "prompt"),
    (GEN, {"prompt": ""}, 400, "prompt"),
    (GEN, {"prompt": "x", "max_new_tokens": 0}, 400, "max_new_tokens"),
    (GEN, {"prompt": "x", "max_new_tokens": "10"}, 400, "max_new_tokens"),
    (GEN, {"prompt": "x", "max_new_tokens": 2.5}, 400, "max_new_tokens"),
    (GEN, {"prompt": "x", "temperature": -1}, 400, "temperature"),
    (GEN, {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    (GEN, {"prompt": "x", "top_p": 0}, 400, "top_p"),
    (GEN, {"prompt": "x", "top_p": 1.5}, 400, "top_p"),
    (GEN, {"prompt": "x", "top_k": -5}, 400, "top_k"),
    (GEN, {"prompt": "x", "min_p": 2}, 400, "min_p"),
    (GEN, {"prompt": "x", "repetition_penalty": 0}, 400, "repetition_penalty"),
    (GEN, {"prompt": "x", "seed": "abc"}, 400, "seed"),
    (GEN, {"prompt": "x", "stop": 5}, 400, "stop"),
    (GEN, {"prompt": "x", "ignore_eos": "yes"}, 400, "ignore_eos"),
    (GEN, {"prompt": "x", "min_tokens": 9, "max_new_tokens": 3}, 400, "min_tokens"),
    (GEN, {"prompt": "x", "logprobs": 99}, 400, "logprobs"),
    (GEN, {"prompt": "x", "max_new_tokens": 4, "max_tokens": 5}, 400, "max_tokens"),
    (GEN, {"prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    (GEN, {"prompt": "x " * 600, "max_new_tokens": 10}, 400, "prompt"),
    # /v1/completions
    (COMPL, {"max_tokens": 3}, 400, "prompt"),
    (COMPL, {"prompt": [1, "a"]}, 400, "prompt"),
    (COMPL, {"prompt": ["a", ""]}, 400, "prompt[1]"),
    (COMPL, {"prompt": ["a", [3, -1]]}, 400, "prompt[1]"),
    (COMPL, {"prompt": ["a"] * 33}, 400, "prompt"),
    (COMPL, {"prompt": [10**9]}, 400, "prompt"),
    (COMPL, {"prompt": [4294967296], "echo": True}, 400, "prompt"),  # beyond what a tokenizer can decode
    (COMPL, {"prompt": "x", "logit_bias": {"5": 10**400}}, 400, "logit_bias"),  # beyond a float
    (COMPL, {"prompt": "x", "n": 0}, 400, "n"),
    (COMPL, {"prompt": "x", "n": 17}, 400, "n"),
    (COMPL, {"prompt": "x", "n": 2, "best_of": 3}, 400, "best_of"),
    (COMPL, {"prompt": "x", "echo": "yes"}, 400, "echo"),
    (COMPL, {"prompt": "x", "prompt_logprobs": 99}, 400, "prompt_logprobs"),
    (COMPL, {"prompt": "x", "include_stop_str_in_output": 1}, 400, "include_stop_str_in_output"),
    (COMPL, {"prompt": "\ud800 unpaired"}, 400, "prompt"),
    (COMPL, {"prompt": "x", "stream": "yes"}, 400, "stream"),
    (COMPL, {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    (COMPL, {"prompt": "x", "logit_bias": {"one": 5}}, 400, "logit_bias"),
    (COMPL, {"prompt": "x", "logit_bias": {"1": 500}}, 400, "logit_bias"),
    (COMPL, {"prompt": "x", "logit_bias": {"999999": 5}}, 400, "logit_bias"),  # outside the vocabulary
    (COMPL, {"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),  # above MINIVLLM_MAX_OUTPUT_TOKENS
    (COMPL, {"prompt": "x", "model": "gpt-4"}, 404, "model"),
    (COMPL, {"prompt": "x", "model": 7}, 400, "model"),
    (COMPL, {"prompt": "x", "wat": True}, 400, "wat"),
    # /v1/chat/completions
    (CHAT, {}, 400, "messages"),
    (CHAT, {"messages": []}, 400, "messages"),
    (CHAT, {"messages": "hi"}, 400, "messages"),
    (CHAT, {"messages": ["hi"]}, 400, "messages[0]"),
    (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user"}]}, 400, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages[0].content"),
    (CHAT, {"messages": MSGS, "max_tokens": -1}, 400, "max_tokens"),
    (CHAT, {"messages": MSGS, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    (CHAT, {"messages": MSGS, "logprobs": 3}, 400, "logprobs"),
    (CHAT, {"messages": MSGS, "top_logprobs": 2}, 400, "top_logprobs"),
    (CHAT, {"messages": MSGS, "logprobs": True, "top_logprobs": 50}, 400, "top_logprobs"),
    (CHAT, {"messages": MSGS, "tools": [{"type": "function"}]}, 400, "tools[0]"),
    (CHAT, {"messages": MSGS, "tools": "get_weather"}, 400, "tools"),
    (CHAT, {"messages": MSGS, "response_format": {"type": "yaml"}}, 400, "response_format"),
    (CHAT, {"messages": MSGS, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400, "response_format"),
    (CHAT, {"messages": MSGS, "guided_regex": "("}, 400, "guided_regex"),
    (COMPL, {"prompt": "x", "guided_json": "{not json"}, 400, "guided_json"),
    (CHAT, {"messages": MSGS, "max_tokens": 1000}, 400, "messages"),
    (CHAT, {"messages": [{"role": "user", "content": "x " * 600}]}, 400, "messages"),
    (CHAT, {"messages": MSGS, "model": "nope"}, 404, "model"),
    (CHAT, {"messages": MSGS, "n": 2, "best_of": 1}, 400, "best_of"),
    (CHAT, {"messages": [{"role": "user", "content": "fine \udfff"}]}, 400, "messages[0].content"),
    (GEN, {"prompt": "x", "stop": ["\ud83d"]}, 400, "stop[0]"),
]


def _id(case):
    path, body, status, param = case
    return f"{path}-{status}-{param}-{json.dumps(body)[:40] if not isinstance(body, bytes) else body[:12]!r}"


@pytest.mark.parametrize("path,body,status,param", CASES, ids=[_id(c) for c in CASES])
async def test_bad_input_gets_status_and_error_json(async_client, engine_client, path, body, status, param):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = await async_client.post(path, raw, content_type="application/json")
    assert resp.status_code == status, resp.content
    assert resp["Content-Type"] == "application/json"
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    assert error["param"] == param


async def test_a_batch_with_one_prompt_too_long_is_refused_whole_for_that_reason(async_client, engine_client):
    limit = engine_client.engine.max_model_len
    body = {"prompt": ["fine", "x " * (limit + 10)], "max_tokens": 2}
    resp = await async_client.post(COMPL, body, content_type="application/json")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_length_exceeded"
    statuses = [row.status async for row in GenerationRequest.objects.all()]
    assert statuses == ["rejected"]  # the refused prompt's row; the fine one never ran


async def test_tokenize_without_the_generation_prompt(async_client, engine_client):
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    resp = await async_client.post("/tokenize", body, content_type="application/json")
    without = await async_client.post("/tokenize", {**body, "add_generation_prompt": False}, content_type="application/json")
    assert resp.status_code == without.status_code == 200
    assert without.json()["count"] < resp.json()["count"]


async def test_tokenizer_info_describes_the_served_tokenizer(async_client, engine_client):
    info = (await async_client.get("/tokenizer_info")).json()
    tokenizer = engine_client.engine.tokenizer
    assert info["eos_token"] == tokenizer.eos_token and info["bos_token"] == tokenizer.bos_token
    assert info["chat_template"] == tokenizer.chat_template and info["model_max_length"] == engine_client.engine.max_model_len


async def test_context_length_error_names_both_numbers(async_client, engine_client):
    limit = engine_client.engine.max_model_len
    resp = await async_client.post(COMPL, {"prompt": "hello", "max_tokens": limit}, content_type="application/json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert str(limit) in error["message"] and str(limit + 1) in error["message"]
    # refused after validation: recorded as rejected, nothing queued
    assert await GenerationRequest.objects.filter(status="rejected").acount() == 1


@pytest.mark.parametrize("path", [GEN, COMPL, CHAT])
async def test_wrong_method_is_405_with_allow(async_client, engine_client, path):
    resp = await async_client.get(path)
    assert resp.status_code == 405 and resp["Allow"] == "POST"
    assert resp.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/v1/models", "/health"])
async def test_post_on_get_endpoint_is_405(async_client, engine_client, path):
    resp = await async_client.post(path, {}, content_type="application/json")
    assert resp.status_code == 405 and "GET" in resp["Allow"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
async def test_non_json_content_type_is_415(async_client, engine_client, content_type):
    resp = await async_client.post(GEN, b'{"prompt": "x"}', content_type=content_type)
    assert resp.status_code == 415
    assert resp.json()["error"]["code"] == "unsupported_media_type"


async def test_unknown_api_path_is_json_404(async_client, engine_client):
    resp = await async_client.get("/v1/engines")
    assert resp.status_code == 404 and "error" in resp.json()


@pytest.mark.parametrize("path", [GEN, COMPL, CHAT])
async def test_no_engine_is_503(async_client, no_engine, path):
    body = {"prompt": "x", "messages": MSGS}
    body = {k: v for k, v in body.items() if (k == "messages") == (path == CHAT)}
    resp = await async_client.post(path, body, content_type="application/json")
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "engine_not_ready"
