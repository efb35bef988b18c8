"""Fault isolation: a failing model step fails only its requests; a dying loop restarts, boundedly."""

from __future__ import annotations

import asyncio

from inference.engine.engine_thread import EngineThread
from tests.engine.helpers import engine_for, generated_ids, greedy, run_to_completion


def raise_once(message: str):
    calls = []

    def hook():
        if not calls:
            calls.append(1)
            raise RuntimeError(message)

    return hook


def test_failing_step_fails_only_its_requests(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    engine.add_request("victim", engine.tokenize("first request"), greedy(5))
    engine.step_fault_hook = raise_once("injected step failure")
    outputs = engine.step()
    assert [(o.request_id, o.finish_reason) for o in outputs] == [("victim", "error")]
    assert "injected step failure" in outputs[0].error
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    engine.add_request("survivor", engine.tokenize("second request"), greedy(5))
    result = run_to_completion(engine)["survivor"]
    assert result[-1].finish_reason == "length" and len(generated_ids(result)) == 5


async def test_dead_loop_ends_streams_with_error_and_restarts(tiny_hf, smollm_tokenizer):
    engine_thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer), max_restarts=1).start()
    assert engine_thread.wait_ready(60)
    first_engine = engine_thread.engine
    stream = engine_thread.submit("inflight", engine_thread.engine.tokenize("a stream the crash interrupts"), greedy(300))
    await stream.__anext__()
    engine_thread.loop_fault_hook = raise_once("injected loop failure")
    rest = [out async for out in stream]
    assert rest[-1].finish_reason == "error" and "injected loop failure" in rest[-1].error
    assert await asyncio.to_thread(engine_thread.wait_ready, 30)
    assert engine_thread.engine is not first_engine and engine_thread.engine.bundle is first_engine.bundle
    again = [
        out async for out in engine_thread.submit("after", engine_thread.engine.tokenize("served after the restart"), greedy(4))
    ]
    assert again[-1].finish_reason == "length"

    def always_fail():
        raise RuntimeError("broken for good")

    engine_thread.loop_fault_hook = always_fail
    for _ in range(600):  # the one allowed restart is spent: dies, restarts, dies for good
        if engine_thread.state == "dead":
            break
        await asyncio.sleep(0.05)
    assert engine_thread.state == "dead" and not engine_thread.ready and "broken for good" in engine_thread.not_ready_reason()
