"""Per-key concurrency in-process (tiny engine): a streaming response holds its key's slot until
its body ends or is dropped; a non-streaming one until it returns."""

from __future__ import annotations

import pytest

from inference.api.common import key_limits
from tests.support.sse import read_stream

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "Bearer key-one"


@pytest.fixture
def one_key(settings):
    settings.MINIVLLM_API_KEYS = ["key-one"]
    settings.MINIVLLM_MAX_CONCURRENT_PER_KEY = 1


async def test_stream_holds_the_slot_until_it_ends(async_client, engine_client, one_key):
    body = {"prompt": "Hello", "max_new_tokens": 3, "ignore_eos": True}
    first = await async_client.post("/generate", body, content_type="application/json", headers={"Authorization": KEY})
    assert first.status_code == 200 and key_limits.in_flight("env:1") == 1
    second = await async_client.post("/generate", body, content_type="application/json", headers={"Authorization": KEY})
    assert second.status_code == 429 and second["Retry-After"] == "1"
    assert second.json()["error"]["code"] == "concurrency_limit_exceeded"
    events = await read_stream(first)
    assert events[-1]["type"] == "done" and key_limits.in_flight("env:1") == 0
    third = await async_client.post(
        "/v1/completions", {"prompt": "Hi", "max_tokens": 2}, content_type="application/json", headers={"Authorization": KEY}
    )
    assert third.status_code == 200 and key_limits.in_flight("env:1") == 0


async def test_refused_request_releases_its_slot(async_client, engine_client, one_key):
    resp = await async_client.post(
        "/v1/completions", {"prompt": "Hi", "max_tokens": 100000}, content_type="application/json", headers={"Authorization": KEY}
    )
    assert resp.status_code == 400 and key_limits.in_flight("env:1") == 0
    resp = await async_client.post(
        "/v1/completions",
        {"prompt": list(range(100, 700)), "max_tokens": 2},
        content_type="application/json",
        headers={"Authorization": KEY},
    )
    assert resp.status_code == 400 and key_limits.in_flight("env:1") == 0
