"""The models a server holds: each one's engine client, loaded when a request names it, unloaded
when the server holds more than it may or when it has been idle for its keep-alive.

One `ModelSlot` per model in the catalogue. A request takes a lease on its model (`acquire`), which
loads it if needed and waits until it is ready; the lease ends once the request's prompts are
submitted, and from then on the engine's own in-flight count keeps the model busy. A busy model is
never unloaded: not to make room (the least recently used idle one goes, and a load waits while
every loaded model is busy), not when idle too long, not when asked to (it goes when its last
request ends). A model that would not fit in the memory available has idle ones unloaded first
(memory_budget.py, which also splits the KV budget among the models). Loads run one at a time (two would only share the cores). An unload drops every
reference to the engine and hands the freed pages back to the OS once the last one is gone (a
request that has just ended may hold its client a moment longer: the reaper looks again).

A model that fails to load, or whose engine dies, is `failed` with the reason; the others go on
serving, and the next request that names it loads it again.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import weakref
from collections.abc import Callable

from ...engine.engine_state import EngineState
from ...engine.loader import return_freed_memory
from ..engine_client import EngineClient
from . import memory_budget
from .catalogue import ModelSpec
from .slot import Lease, ModelNotFound, ModelSlot, ModelUnavailable, memory_bytes

log = logging.getLogger("inference.serving.models")

REAP_INTERVAL_S = 0.25  # how often idle models and dead engines are looked for
WAIT_POLL_S = 0.05
ROOM_WAIT_S = 300.0
LOAD_WAIT_S = 600.0  # how long a request waits for its model's load (or restart) before a 503  # how long a load waits for a busy model to become idle before it is refused
UNLOAD_TIMEOUT_S = 30.0
COLLECT_INTERVAL_S = 1.0  # how often an unloaded engine still referenced is looked for again
COLLECT_GIVE_UP_S = 120.0


class ModelRegistry:
    def __init__(
        self,
        specs: list[ModelSpec],
        *,
        client_factory: Callable[[ModelSpec], EngineClient],
        max_loaded: int = 4,
        keep_alive: float = 300.0,
        default_name: str | None = None,
        default_keep_alive: float | None = None,
        autoload: bool = True,
        fits: Callable[[ModelSpec, int], bool] = memory_budget.fits,
    ):
        """`default_name`: the model a request naming none gets (the one the server starts with);
        it idles for `default_keep_alive` (None: `keep_alive`), the others for `keep_alive`."""
        self.slots: dict[str, ModelSlot] = {}
        self.default_name = default_name
        self.keep_alive = keep_alive
        self.default_keep_alive = keep_alive if default_keep_alive is None else default_keep_alive
        self.max_loaded = max(1, max_loaded)
        self.autoload = autoload
        self.managed = True  # False: the clients come from elsewhere (remote mode, tests); nothing loads or unloads here
        self._factory = client_factory
        self._fits = fits  # whether a model fits in the memory available now and so many bytes more (memory_budget.fits)
        self._lock = threading.RLock()
        self._load_lock = threading.Lock()  # one load at a time: its memory is the process's growth
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._departed: list[tuple[weakref.ref, float]] = []  # unloaded engines not yet freed
        self.waiting_for_room: set[str] = set()  # models whose load waits for a busy one to go idle
        self._last_collect = 0.0
        for spec in specs:
            self.slots[spec.name] = ModelSlot(spec, self._keep_alive_of(spec.name))

    @classmethod
    def of_client(cls, client: EngineClient, name: str, spec_aliases: frozenset[str] = frozenset()) -> ModelRegistry:
        """A catalogue of one around an engine client built elsewhere (tests)."""
        return cls.of_clients({name: client}, [ModelSpec(name, client.config, spec_aliases)], default_name=name)

    @classmethod
    def of_clients(cls, clients: dict[str, EngineClient], specs: list[ModelSpec], *, default_name: str | None) -> ModelRegistry:
        """Models whose clients are built and started elsewhere (tests; remote mode, where the
        `runengine` workers hold the weights and each client follows its model's workers): always
        held, never loaded or unloaded by the registry."""
        registry = cls(specs, client_factory=_not_reloadable, keep_alive=-1.0, default_name=default_name, autoload=False)
        registry.max_loaded = max(1, len(specs))
        registry.managed = False
        for name, client in clients.items():
            registry.slots[name].client = client
        return registry

    def _keep_alive_of(self, name: str) -> float:
        return self.default_keep_alive if name == self.default_name else self.keep_alive

    # ---- finding a model ----------------------------------------------------------------------

    def find(self, requested: str | None) -> ModelSlot:
        """The slot a request's `model` names; none named: the default model, else the most
        recently used loaded one. ModelNotFound otherwise."""
        with self._lock:
            if not requested:
                slot = self.slots.get(self.default_name) if self.default_name else None
                if slot is None:
                    loaded = [s for s in self.slots.values() if s.client is not None]
                    slot = max(loaded, key=lambda s: s.last_used, default=None)
                if slot is None and len(self.slots) == 1:
                    slot = next(iter(self.slots.values()))
                if slot is None:
                    raise ModelNotFound("model is required: this server serves several models")
                return slot
            for slot in self.slots.values():  # the catalogue's names first, then the names engines report
                if slot.spec.answers_to(requested):
                    return slot
            for slot in self.slots.values():
                if slot.answers_to(requested):
                    return slot
        raise ModelNotFound(requested)

    def default_slot(self) -> ModelSlot | None:
        try:
            return self.find(None)
        except ModelNotFound:
            return None

    def loaded(self) -> list[ModelSlot]:
        with self._lock:
            return [slot for slot in self.slots.values() if slot.client is not None]

    # ---- leases ---------------------------------------------------------------------------------

    async def acquire(self, requested: str | None) -> Lease:
        """A lease on the named model, ready: loaded first if it is not (unless autoload is off).
        ModelNotFound, ModelUnavailable."""
        slot = self.find(requested)
        with self._lock:
            slot.leases += 1
            slot.last_used = time.monotonic()
        try:
            client = await self._ready_client(slot, self.autoload)
        except BaseException:
            self._release(slot)
            raise
        return Lease(slot, client, client.model_info, self)

    def _release(self, slot: ModelSlot, keep_alive: float | None = None) -> None:
        with self._lock:
            slot.leases -= 1
            slot.last_used = time.monotonic()
            if keep_alive is not None and self.managed:
                slot.keep_alive = keep_alive
                slot.unload_when_idle = False

    async def _ready_client(self, slot: ModelSlot, load: bool) -> EngineClient:
        """Waits out a load or a restart where the registry loads on demand; without autoload an
        engine that is not ready is refused at once with its reason (a server of one model, as
        before there were many)."""
        deadline = time.monotonic() + LOAD_WAIT_S
        while True:
            if self._stop.is_set():
                raise ModelUnavailable("the server is shutting down", code="engine_not_ready")
            client = slot.client
            if client is not None and client.ready and not slot.loading:
                return client
            busy = slot.loading or (
                client is not None and client.state in (EngineState.NEW, EngineState.LOADING, EngineState.RESTARTING)
            )
            if not load:
                reason = client.not_ready_reason() if client is not None and not isinstance(client, _Pending) else None
                raise ModelUnavailable(
                    reason or f"the model {slot.name} is not loaded ({slot.error or 'autoload is off'})", code="engine_not_ready"
                )
            if busy:
                if time.monotonic() > deadline:
                    raise ModelUnavailable(
                        f"the model {slot.name} is still loading after {LOAD_WAIT_S:.0f}s", code="engine_not_ready"
                    )
                await asyncio.sleep(WAIT_POLL_S)
                continue
            await self.load(slot.name)
            if slot.client is None:  # the load failed: the reason is in slot.error
                raise ModelUnavailable(f"the model {slot.name} failed to load: {slot.error}")
            load = False  # one load per request: a second failure is reported, not retried

    # ---- loading and unloading ------------------------------------------------------------------

    async def load(self, requested: str) -> ModelSlot:
        """Starts loading the model (making room first) and waits until it is ready or failed."""
        slot = self.find(requested)
        if not self.managed:
            raise ModelUnavailable(f"the model {slot.name} is served by engines this process does not load", code="not_managed")
        client = slot.client
        if client is not None and not slot.loading and client.state == EngineState.DEAD:
            await asyncio.to_thread(self._forget_client, slot, client)
        del client
        if slot.client is None:
            await self._make_room(slot)
            self.start_loading(slot)
        while slot.loading:
            await asyncio.sleep(WAIT_POLL_S)
        return slot

    def start_loading(self, slot: ModelSlot) -> None:
        """Begins the slot's load in a thread of its own, unless it is loaded or loading already
        (the caller has made room)."""
        with self._lock:
            if slot.client is not None or self._stop.is_set():
                return
            slot.error = None
            slot.keep_alive = self._keep_alive_of(slot.name)
            slot.unload_when_idle = False
            slot.client = _Pending()
            slot.loading = True
        threading.Thread(target=self._load, args=(slot,), name=f"minivllm-load-{slot.name}", daemon=True).start()

    def _load(self, slot: ModelSlot) -> None:
        try:
            self._load_locked(slot)
        finally:
            slot.loading = False

    def _load_locked(self, slot: ModelSlot) -> None:
        with self._load_lock:
            began = time.monotonic()
            log.info("loading model %s", slot.name)
            client = None
            try:
                client = self._factory(slot.spec)
                slot.client = client
                client.start()
                client.wait_ready()
            except Exception as exc:  # a factory that raises is a failed load like any other
                slot.error = f"{type(exc).__name__}: {exc}"
                slot.client = None
                log.error("model %s failed to load: %s", slot.name, slot.error)
                if client is not None:
                    client.shutdown(1.0)
                return
            if self._stop.is_set():  # the server stopped while it loaded
                client.shutdown(UNLOAD_TIMEOUT_S)
                return
            if not client.ready:
                slot.error = client.error or client.not_ready_reason()
                log.error("model %s failed to load: %s", slot.name, slot.error)
                self._forget_client(slot, client)
                return
            slot.load_seconds = time.monotonic() - began
            slot.loaded_at = time.time()
            slot.last_used = time.monotonic()
            log.info("model %s loaded in %.1fs (%.0f MB)", slot.name, slot.load_seconds, (memory_bytes(client) or 0) / 2**20)

    async def _make_room(self, slot: ModelSlot) -> None:
        """Unloads the least recently used idle models until one more fits; waits while all are busy."""
        deadline = time.monotonic() + ROOM_WAIT_S
        try:
            await self._wait_for_room(slot, deadline)
        finally:
            self.waiting_for_room.discard(slot.name)

    async def _wait_for_room(self, slot: ModelSlot, deadline: float) -> None:
        freed = 0  # what the models unloaded here give back (the OS sees it a second or so later)
        while True:
            with self._lock:
                others = [s for s in self.slots.values() if s.client is not None and s is not slot]
                idle = [s for s in others if s.in_flight == 0 and s.status in ("loaded", "failed")]
                victim = min(idle, key=lambda s: s.last_used, default=None)
                if len(others) < self.max_loaded:
                    loading = sum(memory_budget.needed_bytes(s.spec) for s in others if s.loading)  # not taken yet
                    if victim is None or self._fits(slot.spec, freed - loading):
                        return  # (a model that does not fit with only busy ones loaded loads anyway: none can go)
                    why = "memory"
                else:
                    why = "MINIVLLM_MODELS_MAX"
            if victim is not None:
                log.info("unloading model %s (least recently used; %s) to load %s", victim.name, why, slot.name)
                held = memory_bytes(victim.client) if victim.status == "loaded" else 0
                if await asyncio.to_thread(self.unload_now, victim):
                    freed += held or 0
                continue
            self.waiting_for_room.add(slot.name)
            if time.monotonic() > deadline:
                raise ModelUnavailable(
                    f"cannot load {slot.name}: all {self.max_loaded} loaded models are busy (MINIVLLM_MODELS_MAX)"
                )
            await asyncio.sleep(WAIT_POLL_S)

    async def unload(self, requested: str) -> bool:
        """Unloads the model now if it is idle (True), else once its last request ends (False)."""
        slot = self.find(requested)
        if not self.managed:
            raise ModelUnavailable(f"the model {slot.name} is served by engines this process does not unload", code="not_managed")
        with self._lock:
            if slot.client is None:
                slot.error = None
                return True
            if slot.in_flight or slot.status == "loading":
                slot.unload_when_idle = True
                return False
        if await asyncio.to_thread(self.unload_now, slot):
            return True
        with self._lock:  # a request took it in the meantime: it goes once idle
            slot.unload_when_idle = True
        return False

    def unload_now(self, slot: ModelSlot, *, only_if_idle: bool = True) -> bool:
        """Stops the model's engine and gives its memory back; not while a request holds it
        (unless `only_if_idle` is off: its requests end with `abort`). False where it did not."""
        with self._lock:
            client = slot.client
            if client is None or slot.loading or (only_if_idle and slot.in_flight):
                return False
            slot.client = None
            slot.unload_when_idle = False
            slot.loaded_at = slot.load_seconds = None
        log.info("unloading model %s", slot.name)
        client.shutdown(UNLOAD_TIMEOUT_S)
        self._let_go(weakref.ref(client))
        return True

    def _let_go(self, departed: weakref.ref) -> None:
        """The engine's memory goes back to the OS once the last reference to it is gone: a
        request that has just ended may still hold its client for a moment, so the reaper looks
        again until it has (`_collect_departed`). The callers hold only this weak reference."""
        with self._lock:
            self._departed.append((departed, time.monotonic()))
        self._collect_departed(force=True)

    def _collect_departed(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self._departed or (not force and now - self._last_collect < COLLECT_INTERVAL_S):
            return
        self._last_collect = now
        gc.collect()
        with self._lock:
            gone = [ref for ref, _ in self._departed if ref() is None]
            for ref, since in self._departed:
                if ref() is not None and now - since > COLLECT_GIVE_UP_S:
                    log.warning("an unloaded engine is still referenced after %.0fs: its memory stays", now - since)
                    gone.append(ref)
            self._departed = [(ref, since) for ref, since in self._departed if ref not in gone]
        if gone:
            return_freed_memory()

    def _forget_client(self, slot: ModelSlot, client: EngineClient) -> None:
        """A dead engine: its reason kept, its memory let go."""
        with self._lock:
            if slot.client is not client:
                return
            slot.error = client.error or client.not_ready_reason()
            slot.client = None
        client.shutdown(1.0)
        self._let_go(weakref.ref(client))

    # ---- the reaper: idle models and dead engines ---------------------------------------------

    def start(self) -> ModelRegistry:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap_forever, name="minivllm-models", daemon=True)
            self._reaper.start()
        return self

    def _reap_forever(self) -> None:
        while not self._stop.wait(REAP_INTERVAL_S):
            try:
                self.reap()
            except Exception:
                log.exception("the idle-model check failed")

    def reap(self, now: float | None = None) -> None:
        """Unloads each model idle past its keep-alive (or asked to go once idle); lets go of dead engines."""
        now = time.monotonic() if now is None else now
        self._collect_departed()
        for slot in list(self.slots.values()):
            client = slot.client
            if client is None or slot.loading:
                continue
            if client.state == EngineState.DEAD:
                log.error("model %s: its engine died (%s)", slot.name, client.error)
                self._forget_client(slot, client)
                continue
            if slot.status != "loaded":
                continue
            with self._lock:
                if slot.in_flight:
                    slot.last_used = now
                    continue
                expired = slot.keep_alive >= 0 and now - slot.last_used >= slot.keep_alive
                if not (expired or slot.unload_when_idle):
                    continue
            log.info("model %s idle for %.0fs: unloading", slot.name, now - slot.last_used)
            client = None  # this frame must not keep the engine alive past its unload
            self.unload_now(slot)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops every model's engine (their streams end with `abort`) and the reaper."""
        self._stop.set()
        for slot in list(self.slots.values()):
            client = slot.client
            if client is not None and not isinstance(client, _Pending):
                client.shutdown(timeout)

    # ---- what the routes and the dashboard show -----------------------------------------------

    def describe(self) -> list[dict]:
        with self._lock:
            return [slot.describe(default=slot.name == self.default_name, managed=self.managed) for slot in self.slots.values()]


class _Pending:
    """Stands in a slot between the load's start and its engine client's creation."""

    state = EngineState.LOADING
    ready = False
    error = None
    model_info = None

    def num_in_flight(self) -> int:
        return 0


def _not_reloadable(spec: ModelSpec) -> EngineClient:
    raise RuntimeError(f"the model {spec.name} was given to the server ready-made and cannot be loaded again")
