"""Limits on a live server (set small in conftest): each refused with its status and the error shape."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.security.conftest import OTHER_ENV_KEY, bearer
from tests.support.engine_fixtures import wait_until
from tests.support.sse import assert_error_shape

pytestmark = [pytest.mark.live, pytest.mark.real_model]

CHAT = [{"role": "user", "content": "Hi"}]


def post(server, path, body, key=None, **kwargs) -> httpx.Response:
    headers = bearer(key or server.keys.env)
    if isinstance(body, (bytes, str)):
        return httpx.post(
            server.url + path, content=body, headers={**headers, "Content-Type": "application/json"}, timeout=60, **kwargs
        )
    return httpx.post(server.url + path, json=body, headers=headers, timeout=60, **kwargs)


def refused(resp: httpx.Response, status: int, param=None, code=None) -> dict:
    assert resp.status_code == status, resp.text
    error = assert_error_shape(resp)
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def test_body_size(secured):
    big = json.dumps({"prompt": "x" * (1024 * 1024 + 10)})
    refused(post(secured, "/v1/completions", big), 413, code="request_too_large")
    refused(post(secured, "/generate", big), 413, code="request_too_large")


def test_prompt_tokens(secured):
    long_prompt = "word " * 400  # ~400 tokens > 200
    refused(post(secured, "/generate", {"prompt": long_prompt}), 400, "prompt", "prompt_too_long")
    refused(post(secured, "/v1/completions", {"prompt": list(range(100, 401))}), 400, "prompt", "prompt_too_long")
    refused(
        post(secured, "/v1/chat/completions", {"messages": [{"role": "user", "content": long_prompt}]}),
        400,
        "messages",
        "prompt_too_long",
    )


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/generate", {"prompt": "Hi", "max_new_tokens": 65}, "max_new_tokens"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 10**12}, "max_tokens"),
        ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 65}, "max_completion_tokens"),
    ],
)
def test_max_tokens_cap(secured, path, body, param):
    refused(post(secured, path, body), 400, param, "max_tokens_too_large")


def test_defaults_are_capped_not_refused(secured):
    resp = post(secured, "/v1/chat/completions", {"messages": CHAT, "ignore_eos": True})
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 64


@pytest.mark.parametrize(
    "stop,code",
    [
        (["a", "b", "c", "d", "e"], "too_many_stop_strings"),
        ("s" * 257, "stop_string_too_long"),
        (["ok", "s" * 257], "stop_string_too_long"),
    ],
)
def test_stop_strings(secured, stop, code):
    for path, body in (
        ("/generate", {"prompt": "Hi"}),
        ("/v1/completions", {"prompt": "Hi"}),
        ("/v1/chat/completions", {"messages": CHAT}),
    ):
        refused(post(secured, path, {**body, "stop": stop, "max_tokens": 2}), 400, "stop", code)


def test_n_and_the_prompt_count_are_bounded(secured):
    refused(post(secured, "/v1/completions", {"prompt": "Hi", "n": 17}), 400, "n")
    refused(post(secured, "/v1/chat/completions", {"messages": CHAT, "n": 0}), 400, "n")
    refused(post(secured, "/v1/completions", {"prompt": ["Hi"] * 33}), 400, "prompt")


def test_per_key_concurrency(secured):
    """Two streams hold the env key's two slots: a third request with it gets 429 (another key
    does not); once they end, the key is served again."""
    body = {"prompt": "Tell me a story", "max_new_tokens": 64, "ignore_eos": True}
    with httpx.Client(timeout=60) as client:
        streams = [
            client.stream("POST", f"{secured.url}/generate", json=body, headers=bearer(secured.keys.env)) for _ in range(2)
        ]
        responses = [stream.__enter__() for stream in streams]
        try:
            # the slot is taken before the headers are sent: both are in flight now
            assert all(resp.status_code == 200 for resp in responses)
            resp = post(secured, "/generate", {"prompt": "Hi", "max_new_tokens": 2})
            error = refused(resp, 429, code="concurrency_limit_exceeded")
            assert resp.headers["Retry-After"] and "limit 2" in error["message"]
            assert post(secured, "/generate", {"prompt": "Hi", "max_new_tokens": 2}, key=OTHER_ENV_KEY).status_code == 200
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
    assert wait_until(lambda: post(secured, "/v1/completions", {"prompt": "Hi", "max_tokens": 2}).status_code == 200, timeout=30)
