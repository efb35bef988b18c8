"""The model registry over real (tiny) engines: loading on demand, at most MODELS_MAX loaded with
the least recently used idle one going, busy models never unloaded, keep-alive, failed loads and
dead engines isolated and retried. Idle time is passed to `reap` as a clock reading, not waited for."""

from __future__ import annotations

import asyncio
import time

import pytest

from inference.engine.engine import LLMEngine
from inference.engine.engine_thread import EngineThread
from inference.engine.errors import QueueFullError
from inference.engine.sample.sampling_params import SamplingParams
from inference.serving.models.catalogue import ModelSpec
from inference.serving.models.registry import ModelNotFound, ModelRegistry, ModelUnavailable
from tests.support.engine_fixtures import async_wait_until, tiny_engine_config


class Factory:
    """Builds each model's engine over the session's tiny weights; `broken` names fail to load."""

    def __init__(self, bundle, broken=(), queues=None):
        self.bundle, self.broken, self.built, self.queues = bundle, set(broken), [], queues or {}

    def __call__(self, spec: ModelSpec) -> EngineThread:
        self.built.append(spec.name)
        if spec.name in self.broken:
            raise OSError(f"{spec.name}.gguf ends inside its header")
        return EngineThread(
            spec.config,
            engine_factory=lambda: LLMEngine(spec.config, bundle=self.bundle),
            max_restarts=0,
            max_queue=self.queues.get(spec.name, 16),
        )


@pytest.fixture
def make_registry(tiny_llama_dir, session_engine_client):
    made = []

    def make(names=("a", "b", "c"), *, broken=(), queues=None, **options) -> ModelRegistry:
        config = tiny_engine_config(tiny_llama_dir)
        factory = Factory(session_engine_client.engine.bundle, broken, queues)
        options.setdefault("fits", lambda spec, spare: True)  # every model fits (the memory check has its own tests)
        registry = ModelRegistry([ModelSpec(name, config) for name in names], client_factory=factory, **options)
        registry.factory = factory
        made.append(registry)
        return registry

    yield make
    for registry in made:
        registry.shutdown()


def loaded(registry) -> list[str]:
    return sorted(slot.name for slot in registry.loaded())


async def use(registry, name, keep_alive=None):
    """One accepted request on `name` (its keep_alive, as a request's, applied when it is done)."""
    lease = await registry.acquire(name)
    lease.release(keep_alive)
    return lease


async def test_a_model_loads_when_a_request_names_it(make_registry):
    registry = make_registry()
    assert [entry["status"] for entry in registry.describe()] == ["unloaded"] * 3
    lease = await registry.acquire("b")
    assert lease.client.ready and lease.info.max_model_len and loaded(registry) == ["b"]
    assert registry.slots["b"].in_flight == 1
    lease.release()
    assert registry.slots["b"].in_flight == 0 and registry.describe()[1]["status"] == "loaded"
    with pytest.raises(ModelNotFound):
        await registry.acquire("nope")


async def test_at_most_max_loaded_and_the_least_recently_used_goes(make_registry):
    registry = make_registry(max_loaded=2)
    for name in ("a", "b", "a", "c"):  # a was used after b: b is the least recently used when c loads
        await use(registry, name)
        assert len(registry.loaded()) <= 2
    assert loaded(registry) == ["a", "c"]
    await use(registry, "b")
    assert loaded(registry) == ["b", "c"]
    assert registry.factory.built == ["a", "b", "c", "b"]


async def test_a_busy_model_is_never_unloaded_to_make_room(make_registry):
    registry = make_registry(max_loaded=1)
    held = await registry.acquire("a")
    waiting = asyncio.ensure_future(registry.acquire("b"))
    assert await async_wait_until(lambda: "b" in registry.waiting_for_room)
    assert not waiting.done() and loaded(registry) == ["a"] and held.client.ready
    held.release()
    lease = await asyncio.wait_for(waiting, 60)
    lease.release()
    assert loaded(registry) == ["b"]


async def test_idle_models_unload_after_their_keep_alive(make_registry):
    registry = make_registry(keep_alive=60.0, default_name="a", default_keep_alive=-1.0)
    await use(registry, "a")
    await use(registry, "b")
    await use(registry, "c", keep_alive=0.0)  # Ollama's keep_alive: this model goes as soon as it is idle
    registry.reap()
    assert loaded(registry) == ["a", "b"]
    registry.reap(now=time.monotonic() + 30)
    assert loaded(registry) == ["a", "b"]
    registry.reap(now=time.monotonic() + 61)
    assert loaded(registry) == ["a"]  # the default model's keep-alive is forever
    held = await registry.acquire("b")
    registry.slots["b"].keep_alive = 0.0
    registry.reap(now=time.monotonic() + 1000)
    assert loaded(registry) == ["a", "b"]  # in use: kept, whatever its keep-alive
    held.release()
    registry.reap()
    assert loaded(registry) == ["a"]


async def test_unloading_a_busy_model_waits_for_its_last_request(make_registry):
    registry = make_registry()
    held = await registry.acquire("a")
    assert await registry.unload("a") is False
    registry.reap()
    assert loaded(registry) == ["a"] and held.client.ready
    held.release()
    registry.reap()
    assert loaded(registry) == []
    await use(registry, "b")
    assert await registry.unload("b") is True and loaded(registry) == []


async def test_a_failed_load_leaves_the_others_serving_and_is_retried(make_registry):
    registry = make_registry(broken={"b"})
    await use(registry, "a")
    with pytest.raises(ModelUnavailable, match="ends inside its header"):
        await registry.acquire("b")
    [entry] = [entry for entry in registry.describe() if entry["id"] == "b"]
    assert entry["status"] == "failed" and "ends inside its header" in entry["error"]
    assert (await registry.acquire("a")).client.ready
    registry.factory.broken.clear()  # the file is fixed: the next request loads it
    await use(registry, "b")
    assert registry.factory.built.count("b") == 2 and loaded(registry) == ["a", "b"]


async def test_a_dead_engine_is_failed_then_loaded_again(make_registry):
    registry = make_registry()
    await use(registry, "a")
    await use(registry, "b")
    client = registry.slots["a"].client

    def die():
        raise RuntimeError("the loop broke")

    client.inject_fault("loop", die)
    assert await async_wait_until(lambda: client.state == "dead")
    registry.reap()
    assert registry.slots["a"].status == "failed" and "the loop broke" in registry.slots["a"].error
    assert registry.slots["b"].client.ready
    lease = await registry.acquire("a")
    lease.release()
    assert lease.client is not client and lease.client.ready


async def test_without_autoload_only_an_explicit_load_loads(make_registry):
    registry = make_registry(autoload=False)
    with pytest.raises(ModelUnavailable, match="not loaded"):
        await registry.acquire("a")
    await registry.load("a")
    await use(registry, "a")


async def test_a_request_naming_no_model_gets_the_default(make_registry):
    registry = make_registry(default_name="c")
    assert (await use(registry, None)).name == "c"
    several = make_registry()
    with pytest.raises(ModelNotFound, match="model is required"):
        await several.acquire(None)
    await use(several, "b")
    assert (await use(several, None)).name == "b"  # none is the default: the most recently used loaded one


async def test_each_model_has_its_own_queue_bound(make_registry):
    registry = make_registry(queues={"a": 0})  # a takes no request at all; b its usual 16
    full = await registry.acquire("a")
    with pytest.raises(QueueFullError):
        full.client.submit("full-1", [1, 2, 3], SamplingParams(max_tokens=2))
    full.release()
    lease = await registry.acquire("b")
    stream = lease.client.submit("open-1", [1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True))
    lease.release()
    outputs = [out async for out in stream]
    assert outputs[-1].finished and outputs[-1].finish_reason == "length"


async def test_a_stream_outliving_its_lease_keeps_the_model_loaded(make_registry):
    registry = make_registry()
    lease = await registry.acquire("a")
    stream = lease.client.submit("long-1", [1, 2, 3], SamplingParams(max_tokens=60, ignore_eos=True))
    lease.release(keep_alive=0.0)  # the request was accepted: the model goes once it is idle
    registry.reap()
    assert loaded(registry) == ["a"] and registry.slots["a"].in_flight == 1
    outputs = [out async for out in stream]
    assert outputs[-1].finish_reason == "length" and not outputs[-1].error
    assert await async_wait_until(lambda: (registry.reap(), loaded(registry) == [])[1])


async def test_a_refused_request_leaves_the_keep_alive_as_it_was(make_registry):
    registry = make_registry(keep_alive=60.0)
    lease = await registry.acquire("a")
    lease.release()  # no keep_alive: a refused request's is not applied (endpoint.served_model)
    registry.reap()
    assert loaded(registry) == ["a"] and registry.slots["a"].keep_alive == 60.0


async def test_a_model_that_does_not_fit_in_memory_unloads_idle_ones_first(make_registry):
    """memory_budget.fits says whether a model fits in the memory available now plus what the
    models just unloaded give back (the OS sees it a second or so later: here, never, so only the
    registry's own count of it can say it fits); filling the real machine's memory is not a test
    one can run. "c" fits once one model's memory is freed, or alone."""
    registry = make_registry(max_loaded=3, fits=lambda spec, spare: spec.name != "c" or spare > 0 or not registry.loaded())
    await use(registry, "a")
    await use(registry, "b")
    assert loaded(registry) == ["a", "b"]  # under MODELS_MAX and fitting: both stay
    await use(registry, "c")
    assert loaded(registry) == ["b", "c"]  # the least recently used went, and one was enough
    await use(registry, "c")  # loaded already: nothing to make room for
    assert loaded(registry) == ["b", "c"]
    await registry.unload("c")
    held = await registry.acquire("b")
    lease = await asyncio.wait_for(registry.acquire("c"), 60)  # a busy model never goes: c loads beside it
    lease.release()
    held.release()
    assert loaded(registry) == ["b", "c"]
