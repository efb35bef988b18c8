"""A client that goes away mid-stream is aborted in the engine: slot and KV blocks freed, row `aborted`."""

import json

import pytest
from asgiref.testing import ApplicationCommunicator

from inference.models import GenerationRequest
from minivllm_site.asgi import application
from tests.support.asgi import http_scope
from tests.support.engine_fixtures import async_wait_until, is_idle
from tests.support.sse import events_of_chunks

pytestmark = pytest.mark.django_db(transaction=True)


async def _receive_events(comm, count: int) -> list:
    chunks = []
    while len(events_of_chunks(chunks)) < count:
        message = await comm.receive_output(timeout=30)
        assert message["type"] == "http.response.body"
        chunks.append(message["body"])
    return events_of_chunks(chunks)


@pytest.mark.parametrize(
    "path,body",
    [
        ("/generate", {"prompt": "Tell me a long story", "max_new_tokens": 400, "ignore_eos": True}),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "A long story"}], "max_tokens": 400, "ignore_eos": True, "stream": True},
        ),
    ],
)
async def test_disconnect_frees_slot_and_blocks_and_marks_row_aborted(engine_client, path, body):
    assert is_idle(engine_client) and engine_client.stats().kv_blocks_used == 0
    comm = ApplicationCommunicator(application, http_scope(path))
    await comm.send_input({"type": "http.request", "body": json.dumps(body).encode(), "more_body": False})
    start = await comm.receive_output(timeout=30)
    assert start["type"] == "http.response.start" and start["status"] == 200
    events = await _receive_events(comm, 3)  # start/role chunk and a couple of tokens
    request_id = events[0].get("request_id") or events[0]["id"]

    # mid-stream: the request holds a slot and KV blocks
    stats = engine_client.stats()
    assert request_id in [s["request_id"] for s in stats.slots]
    assert stats.kv_blocks_used > 0

    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=30)

    assert await async_wait_until(lambda: engine_client.stats().kv_blocks_used == 0 and is_idle(engine_client))
    assert all(slot["request_id"] is None for slot in engine_client.stats().slots)

    async def row_aborted():
        row = await GenerationRequest.objects.aget(id=request_id)
        return row.status == "aborted"

    assert await async_wait_until(row_aborted)
    row = await GenerationRequest.objects.aget(id=request_id)
    assert row.finish_reason == "abort" and row.error == "client disconnected"
    assert 0 < row.completion_tokens < 400
    assert row.output_text and row.latency is not None
