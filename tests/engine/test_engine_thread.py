"""EngineThread: the background loop feeding asyncio consumers."""

from __future__ import annotations

import asyncio

import pytest

from inference.engine.engine_thread import EngineThread
from inference.engine.errors import EngineNotReadyError, QueueFullError
from inference.engine.sample.sampling_params import SamplingParams
from tests.support.engine_fixtures import async_wait_until
from tests.support.engine_helpers import engine_for, greedy


@pytest.fixture
def engine_thread(tiny_hf, smollm_tokenizer):
    thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer, max_num_seqs=2), max_queue=2)
    thread.start()
    assert thread.wait_ready(60)
    yield thread
    thread.shutdown()


async def collect(stream):
    return [out async for out in stream]


async def test_streams_deliver_deltas_until_finished(engine_thread):
    streams = [engine_thread.submit(f"r{i}", engine_thread.engine.tokenize(f"prompt {i}"), greedy(8)) for i in range(2)]
    results = await asyncio.gather(*(collect(s) for s in streams))
    for outputs in results:
        assert outputs[-1].finished and outputs[-1].finish_reason == "length"
        assert sum(len(o.token_ids) for o in outputs) == 8
        assert all(not o.finished for o in outputs[:-1])


async def test_one_threadsafe_call_per_loop_per_step(engine_thread, monkeypatch):
    loop = asyncio.get_running_loop()
    calls = []
    original = loop.call_soon_threadsafe
    monkeypatch.setattr(loop, "call_soon_threadsafe", lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    steps_before = engine_thread.engine.num_steps
    await asyncio.gather(
        *(collect(engine_thread.submit(f"c{i}", engine_thread.engine.tokenize("count calls"), greedy(6))) for i in range(2))
    )
    assert len(calls) <= engine_thread.engine.num_steps - steps_before  # both requests' tokens shared each call


async def test_abort_ends_the_stream_and_frees_the_blocks(engine_thread):
    stream = engine_thread.submit("gone", engine_thread.engine.tokenize("a client that leaves"), greedy(200))
    first = await stream.__anext__()
    assert not first.finished
    stream.abort()
    rest = await collect(stream)
    assert rest[-1].finish_reason == "abort"

    def freed():  # the snapshot is refreshed by the loop's pass after the abort
        stats = engine_thread.stats()
        return stats.kv_blocks_used == 0 and all(s["request_id"] is None for s in stats.slots)

    assert await async_wait_until(freed), engine_thread.stats()


async def test_full_waiting_queue_refuses_new_requests(engine_thread):
    accepted, refused = [], 0
    for i in range(6):
        try:
            accepted.append(engine_thread.submit(f"q{i}", engine_thread.engine.tokenize("fill the queue"), greedy(100)))
        except QueueFullError:
            refused += 1
    assert refused >= 2  # two slots + a queue of two: the rest are refused before queueing
    for stream in accepted:
        stream.abort()
    await asyncio.gather(*(collect(s) for s in accepted))


async def test_shutdown_ends_in_flight_requests(tiny_hf, smollm_tokenizer):
    thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer)).start()
    assert thread.wait_ready(60)
    stream = thread.submit("inflight", thread.engine.tokenize("never finishes on its own"), greedy(400))
    await stream.__anext__()
    await asyncio.to_thread(thread.shutdown)
    rest = await collect(stream)
    assert rest[-1].finished and rest[-1].finish_reason == "abort"
    assert thread.state == "stopped"
    with pytest.raises(EngineNotReadyError, match="shutting down"):
        thread.submit("late", thread.engine.tokenize("too late"), greedy(1))


async def test_not_ready_while_loading_and_dead_after_a_failed_load():
    def failing_factory():
        raise RuntimeError("weights are corrupt")

    thread = EngineThread(engine_factory=failing_factory)
    with pytest.raises(EngineNotReadyError):
        thread.submit("early", [1], SamplingParams())
    thread.start()
    assert not thread.wait_ready(10)
    assert thread.state == "dead" and "weights are corrupt" in thread.error
    with pytest.raises(EngineNotReadyError, match="died"):
        thread.submit("x", [1], SamplingParams())
