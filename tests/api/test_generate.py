"""POST /generate: the seed's SSE event sequence, through the real engine."""

import pytest

from inference.models import GenerationRequest
from tests.support.sse import read_stream

pytestmark = pytest.mark.django_db(transaction=True)


async def test_event_sequence_start_tokens_done(async_client, engine_client):
    resp = await async_client.post(
        "/generate",
        {"prompt": "Hello there", "max_new_tokens": 8, "temperature": 0, "top_p": 1.0, "ignore_eos": True},
        content_type="application/json",
    )
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/event-stream")
    events = await read_stream(resp)

    start, *tokens, done = events
    assert start["type"] == "start" and start["request_id"].startswith("gen-")
    assert tokens and all(e["type"] == "token" and isinstance(e["text"], str) for e in tokens)
    assert done == {
        "type": "done",
        "finish_reason": "length",
        "usage": {
            "prompt_tokens": done["usage"]["prompt_tokens"],
            "completion_tokens": 8,
            "total_tokens": done["usage"]["prompt_tokens"] + 8,
        },
    }
    assert done["usage"]["prompt_tokens"] > 0

    row = await GenerationRequest.objects.aget(id=start["request_id"])
    assert row.status == "completed" and row.finish_reason == "length"
    assert row.endpoint == "generate" and row.prompt == "Hello there"
    assert row.output_text == "".join(e["text"] for e in tokens)
    assert (row.prompt_tokens, row.completion_tokens) == (done["usage"]["prompt_tokens"], 8)
    assert row.sampling_params["max_tokens"] == 8 and row.sampling_params["temperature"] == 0
    assert row.latency is not None and row.time_to_first_token is not None and row.queue_time is not None


async def test_seeded_sampling_is_reproducible(async_client, engine_client):
    """The same seed gives the same text; other seeds give other texts (so seed and temperature are used)."""
    body = {"prompt": "Once upon a time", "max_new_tokens": 6, "temperature": 0.9, "top_k": 20, "ignore_eos": True}
    texts = []
    for seed in (7, 7, 8, 9, 10):
        resp = await async_client.post("/generate", {**body, "seed": seed}, content_type="application/json")
        texts.append("".join(e.get("text", "") for e in await read_stream(resp)))
    assert texts[0] == texts[1]
    assert len(set(texts[1:])) > 1, texts


async def test_token_events_carry_logprobs_when_asked(async_client, engine_client):
    resp = await async_client.post(
        "/generate",
        {"prompt": "Hi", "max_new_tokens": 3, "temperature": 0, "logprobs": 2, "ignore_eos": True},
        content_type="application/json",
    )
    tokens = [e for e in await read_stream(resp) if e["type"] == "token"]
    entries = [lp for e in tokens for lp in e["logprobs"]]
    assert len(entries) == 3
    assert all(lp["logprob"] <= 0 and len(lp["top"]) == 2 for lp in entries)
