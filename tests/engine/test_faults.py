"""Fault isolation: a failing model step fails only its requests; a dying loop restarts, boundedly."""

from __future__ import annotations

import asyncio

import pytest
import torch

from inference.engine.engine_thread import EngineThread
from inference.engine.errors import FatalDeviceError
from tests.support.engine_helpers import engine_for, generated_ids, greedy, run_to_completion


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
    engine.test_faults.step = raise_once("injected step failure")
    outputs = engine.step()
    assert [(o.request_id, o.finish_reason) for o in outputs] == [("victim", "error")]
    assert "injected step failure" in outputs[0].error
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks
    engine.add_request("survivor", engine.tokenize("second request"), greedy(5))
    result = run_to_completion(engine)["survivor"]
    assert result[-1].finish_reason == "length" and len(generated_ids(result)) == 5


async def test_a_dead_loop_restarts_and_its_streams_carry_on_where_they_were(tiny_hf, smollm_tokenizer):
    """The loop dies mid-stream: the restarted engine resumes the request from the tokens its client
    was sent (prompt + those, prefilled again), so the stream ends as it would have without the
    fault, token for token, and says where it ran."""
    reference = engine_for(tiny_hf, smollm_tokenizer)
    prompt = reference.tokenize("a stream the crash interrupts")
    reference.add_request("r", prompt, greedy(40))
    expected = generated_ids(run_to_completion(reference)["r"])
    engine_thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer), max_restarts=1).start()
    assert engine_thread.wait_ready(60)
    first_engine = engine_thread.engine
    stream = engine_thread.submit("inflight", prompt, greedy(40))
    before = [await stream.__anext__() for _ in range(3)]
    engine_thread.test_faults.loop = raise_once("injected loop failure")
    rest = [out async for out in stream]
    assert rest[-1].finish_reason == "length" and rest[-1].error is None
    assert generated_ids(before + rest) == expected and rest[-1].completion_tokens == 40
    segments = rest[-1].resumes
    assert [s["engine"] for s in segments] == ["engine", "engine (restart 1)"] and sum(s["tokens"] for s in segments) == 40
    assert segments[0]["tokens"] >= 3 and engine_thread.resumed_requests == 1
    assert await asyncio.to_thread(engine_thread.wait_ready, 30)
    assert engine_thread.engine is not first_engine and engine_thread.engine.bundle is first_engine.bundle
    # the old pool was given back before the new one was planned (on a GPU, one beside the other would shrink it)
    assert first_engine.model_runner.kv_caches == [] and first_engine.model_runner.kv_pool_bytes == 0
    assert engine_thread.engine.kv_cache.num_blocks == first_engine.kv_cache.num_blocks
    again = [
        out async for out in engine_thread.submit("after", engine_thread.engine.tokenize("served after the restart"), greedy(4))
    ]
    assert again[-1].finish_reason == "length"

    def always_fail():
        raise RuntimeError("broken for good")

    engine_thread.test_faults.loop = always_fail
    for _ in range(600):  # the one allowed restart is spent: dies, restarts, dies for good
        if engine_thread.state == "dead":
            break
        await asyncio.sleep(0.05)
    assert engine_thread.state == "dead" and not engine_thread.ready and "broken for good" in engine_thread.not_ready_reason()


def raise_always(exc: BaseException):
    def hook():
        raise exc

    return hook


async def wait_for_state(engine_thread: EngineThread, state: str) -> None:
    for _ in range(600):
        if engine_thread.state == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the engine stayed {engine_thread.state!r}, not {state!r}")


def raise_once_with(exc: BaseException):
    calls = []

    def hook():
        if not calls:
            calls.append(1)
            raise exc

    return hook


def test_running_out_of_device_memory_fails_only_that_step(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    engine.add_request("victim", engine.tokenize("first request"), greedy(5))
    engine.test_faults.step = raise_once_with(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    [output] = engine.step()
    assert output.finish_reason == "error" and "out of memory" in output.error
    engine.add_request("survivor", engine.tokenize("second request"), greedy(5))
    assert run_to_completion(engine)["survivor"][-1].finish_reason == "length"


async def test_a_sticky_device_error_ends_the_engine_without_a_restart(tiny_hf, smollm_tokenizer):
    """A device-side assert or an illegal access leaves the CUDA context unusable: no later step
    would run, so the engine dies (health 503, `runengine` exits 1) instead of failing every request."""
    engine_thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer), max_restarts=3).start()
    assert engine_thread.wait_ready(60)
    first_engine = engine_thread.engine
    stream = engine_thread.submit("inflight", first_engine.tokenize("a stream the device failure ends"), greedy(300))
    await stream.__anext__()
    with pytest.raises(FatalDeviceError):  # the engine itself says so, whoever drives it
        engine = engine_for(tiny_hf, smollm_tokenizer)
        engine.add_request("r", engine.tokenize("hello"), greedy(2))
        engine.test_faults.step = raise_always(torch.AcceleratorError("CUDA error: device-side assert triggered"))
        engine.step()
    first_engine.test_faults.step = raise_always(torch.AcceleratorError("CUDA error: an illegal memory access was encountered"))
    rest = [out async for out in stream]
    assert rest[-1].finish_reason == "error" and "illegal memory access" in rest[-1].error
    await wait_for_state(engine_thread, "dead")
    assert engine_thread.engine is first_engine and not engine_thread.ready  # no restart was tried
    assert "illegal memory access" in engine_thread.not_ready_reason()


async def test_a_restart_that_fails_ends_the_engine_instead_of_leaving_it_restarting(tiny_hf, smollm_tokenizer):
    engine_thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer), max_restarts=3).start()
    assert engine_thread.wait_ready(60)
    engine_thread.test_faults.restart = raise_always(RuntimeError("no memory for a new pool"))
    engine_thread.test_faults.loop = raise_once("injected loop failure")
    await wait_for_state(engine_thread, "dead")
    assert "the restart failed" in engine_thread.error and "no memory for a new pool" in engine_thread.error
