"""The waiting queue is bounded: above MINIVLLM_MAX_QUEUE requests get 429 before anything is queued."""

import pytest

from inference.models import GenerationRequest
from inference.serving import runtime
from tests.support.engine_fixtures import async_wait_until, start_engine_thread, tiny_engine_config
from tests.support.sse import read_stream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_slot_engine_thread(session_engine_client, tiny_llama_dir):
    """One batch slot and room for one waiting request (the session's loaded weights reused)."""
    config = tiny_engine_config(tiny_llama_dir, max_num_seqs=1)
    engine_client = start_engine_thread(config, max_queue=1, bundle=session_engine_client.engine.bundle)
    previous = runtime.install(engine_client)
    yield engine_client
    runtime.install(previous)
    engine_client.shutdown()


async def test_full_queue_gets_429_with_retry_after(async_client, one_slot_engine_thread):
    engine_client = one_slot_engine_thread
    long = {"prompt": "Go on", "max_new_tokens": 300, "ignore_eos": True}
    running = await async_client.post("/generate", long, content_type="application/json")
    assert await async_wait_until(lambda: engine_client.stats().running == 1)
    waiting = await async_client.post("/generate", {**long, "max_new_tokens": 2}, content_type="application/json")
    assert running.status_code == waiting.status_code == 200
    assert engine_client.num_waiting() == 1

    refused = await async_client.post("/v1/completions", {"prompt": "x", "max_tokens": 2}, content_type="application/json")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
    assert engine_client.num_waiting() == 1  # nothing was queued for it

    rejected = await GenerationRequest.objects.aget(status="rejected")
    assert rejected.endpoint == "completions" and "queue" in rejected.error

    # the accepted ones finish normally
    for resp in (running, waiting):
        assert (await read_stream(resp))[-1]["type"] == "done"


async def test_zero_queue_refuses_everything(async_client, session_engine_client, tiny_llama_dir):
    engine_client = start_engine_thread(
        tiny_engine_config(tiny_llama_dir), max_queue=0, bundle=session_engine_client.engine.bundle
    )
    previous = runtime.install(engine_client)
    try:
        resp = await async_client.post("/generate", {"prompt": "x"}, content_type="application/json")
        assert resp.status_code == 429
    finally:
        runtime.install(previous)
        engine_client.shutdown()
