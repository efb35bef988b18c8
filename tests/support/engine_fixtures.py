"""Fixtures for the serving-layer tests: a real EngineThread over the tiny random Llama.

Imported by the conftest.py of tests/api, tests/inference and tests/site. No mocks: every
request goes through the real engine; only the model is tiny.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.engine_thread import EngineThread

READY_TIMEOUT_S = 120


def tiny_engine_config(model_dir: str, **overrides) -> EngineConfig:
    options = dict(model=model_dir, device="cpu", dtype="float32", max_num_seqs=4, kv_cache_mb=8, max_num_batched_tokens=256)
    options.update(overrides)
    return EngineConfig(**options)


def start_engine_thread(
    config: EngineConfig, *, max_queue: int = 16, bundle=None, gate: threading.Event | None = None
) -> EngineThread:
    """An EngineThread, optionally reusing a loaded bundle and held in "loading" until `gate` is set."""

    def factory():
        if gate is not None:
            gate.wait()
        return LLMEngine(config, bundle=bundle)

    engine_client = EngineThread(config, engine_factory=factory, max_queue=max_queue).start()
    if gate is None:
        assert engine_client.wait_ready(READY_TIMEOUT_S), engine_client.error
    return engine_client


def wait_until(condition, timeout: float = 30.0, interval: float = 0.02) -> bool:
    """Polls `condition` (no timing assertion: the timeout only bounds a hang)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


async def async_wait_until(condition, timeout: float = 30.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return True
        await asyncio.sleep(interval)
    return False


@contextlib.contextmanager
def installed(engine_client: EngineThread):
    """`engine_client` as the process's engine for one test (for a module's own engine, over
    another tiny model); on leaving, the engine is idle and the previous one is back."""
    from inference.serving import runtime

    previous = runtime.install(engine_client)
    try:
        yield engine_client
        assert wait_until(lambda: is_idle(engine_client)), "the engine still has work after the test"
    finally:
        runtime.install(previous)


def is_idle(engine_client: EngineThread) -> bool:
    stats = engine_client.stats()
    return stats.running == 0 and stats.waiting == 0 and engine_client.num_waiting() == 0


@pytest.fixture(scope="session")
def tiny_config(tiny_llama_dir) -> EngineConfig:
    return tiny_engine_config(tiny_llama_dir)


@pytest.fixture(scope="session")
def session_engine_client(tiny_config):
    engine_client = start_engine_thread(tiny_config)
    yield engine_client
    engine_client.shutdown()


@pytest.fixture
def engine_client(session_engine_client):
    """The session's engine, installed as the process engine for one test; afterwards the engine
    is idle and every request the test made has closed (no leaked jobs)."""
    from inference.serving import jobs, runtime

    previous = runtime.install(session_engine_client)
    yield session_engine_client
    idle = wait_until(lambda: is_idle(session_engine_client))
    leaked = jobs.live_jobs()
    jobs._live.clear()
    runtime.install(previous)
    assert idle, "the engine still has work after the test"
    assert not leaked, f"requests never closed: {[job.request_id for job in leaked]}"


@pytest.fixture
def no_engine():
    """No engine at all, as with MINIVLLM_AUTOSTART=0."""
    from inference.serving import runtime

    previous = runtime.install(None)
    yield
    runtime.install(previous)
