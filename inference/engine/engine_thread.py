"""EngineThread: runs LLMEngine's step loop in a background thread and streams to asyncio consumers.

The engine is only touched from its own thread. Callers on event loops hand requests in
through a queue; each step's outputs go back with one `call_soon_threadsafe` per event loop,
carrying every output for that loop (one call per token would cost several times more).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from .config import EngineConfig
from .engine import LLMEngine
from .engine_state import EngineState, ModelInfo
from .engine_stats import EngineStats
from .errors import EngineNotReadyError, is_fatal_device_error
from .fault_hooks import FaultHooks
from .gguf import packed_cache
from .outputs import RequestOutput
from .request_streams import RequestStream, check_can_submit, deliver, final_output
from .resume import Progress
from .sample.sampling_params import SamplingParams

log = logging.getLogger("minivllm.engine")

IDLE_WAIT_S = 0.05
SNAPSHOT_EVERY_S = 0.02  # a busy loop's stats snapshot at most this often, or when a request ends
ENGINE_NAME = "engine"  # what a resumed request's history names this process's engine
RESTART_BUDGET_RESET_S = 600.0


@dataclass(frozen=True)
class AddRequest:
    """Inbox command: a checked prompt for the engine."""

    request_id: str
    token_ids: list[int]
    params: SamplingParams
    resume: list | None = None  # a request another engine died serving (engine/resume.py)


@dataclass(frozen=True)
class AbortRequest:
    """Inbox command: stop a request (queued, running, or not yet taken from the inbox)."""

    request_id: str


class EngineThread:
    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        engine_factory: Callable[[], LLMEngine] | None = None,
        max_queue: int = 64,
        max_restarts: int = 3,
    ):
        self.config = config or EngineConfig()
        self._factory = engine_factory or (lambda: LLMEngine(self.config))
        self.max_queue = max_queue
        self.max_restarts = max_restarts
        self.test_faults = FaultHooks()  # test-only: its loop and restart hooks (engine/fault_hooks.py)
        self.engine: LLMEngine | None = None
        self.state = EngineState.NEW  # new -> loading -> ready (<-> restarting) -> stopped | dead
        self._model_info: ModelInfo | None = None
        self.error: str | None = None
        self.last_loop_at = time.monotonic()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._streams: dict[str, RequestStream] = {}
        self._streams_lock = threading.Lock()
        self._progress: dict[str, Progress] = {}  # what each stream was sent: a restart resumes from it
        self.resumed_requests = 0
        self._snapshot = EngineStats()
        self._snapshot_at = 0.0
        self._snapshot_load = (0, 0)  # (running, waiting) when it was taken
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> EngineThread:
        self.state = EngineState.LOADING
        self._thread = threading.Thread(target=self._main, name="minivllm-engine", daemon=True)
        self._thread.start()
        return self

    @property
    def ready(self) -> bool:
        return self.state == EngineState.READY and self._thread is not None and self._thread.is_alive()

    @property
    def model_info(self) -> ModelInfo | None:
        """The served model's facts (the engine's own ModelInfo), kept from READY on; None before."""
        return self._model_info

    def inject_fault(self, kind: str, hook: Callable[[], None]) -> None:
        """Tests only (engine/fault_hooks.py, serving/fault_injection.py): `hook` runs, and may
        raise, in the next model steps ("step"), in the engine loop ("loop"), or once before a
        restart builds its engine ("restart")."""
        if kind not in ("step", "loop", "restart"):
            raise ValueError(f"unknown fault kind {kind!r}")
        setattr(self.engine.test_faults if kind == "step" else self.test_faults, kind, hook)

    def wait_ready(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state in (EngineState.NEW, EngineState.LOADING, EngineState.RESTARTING):
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return self.ready

    def shutdown(self, timeout: float = 10.0) -> None:
        """Ends every in-flight request with a final `abort` output, then stops the loop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        packed_cache.wait_for_writes(timeout)  # a server stopped right after its start still leaves the whole file
        if self.state not in (EngineState.DEAD,):
            self.state = EngineState.STOPPED

    # -- requests (any thread with a running event loop) ---------------------------------

    def submit(self, request_id: str, token_ids: list[int], params: SamplingParams, resume: list | None = None) -> RequestStream:
        """Queues a prompt of token ids that the caller has checked against model_info's limits
        (serving/submission.py); the engine still refuses one that does not fit, as an error output.
        `resume`: another engine died serving it, having delivered these tokens (engine/resume.py)."""
        if self._stop.is_set():
            raise EngineNotReadyError(self.not_ready_reason())
        check_can_submit(self)
        token_ids = list(token_ids)
        stream = RequestStream(self, request_id)
        with self._streams_lock:
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._streams[request_id] = stream
            self._progress[request_id] = Progress(token_ids, params, ENGINE_NAME, resume)
        self._inbox.put(AddRequest(request_id, token_ids, params, resume))
        self._wake.set()
        return stream

    def compile_grammar(self, spec: dict) -> None:
        """Compiles (and caches) a request's grammar in the caller's thread, off the engine loop;
        GrammarError (a SamplingParamsError naming the field) when it cannot constrain decoding."""
        if not self.ready:
            raise EngineNotReadyError(self.not_ready_reason())
        self.engine.grammars.compile(spec)

    def abort(self, request_id: str) -> None:
        self._inbox.put(AbortRequest(request_id))
        self._wake.set()

    def num_waiting(self) -> int:
        engine = self.engine
        return (len(engine.scheduler.waiting) if engine else 0) + self._inbox.qsize()

    def num_in_flight(self) -> int:
        """Requests submitted whose streams have not ended (queued, running, or still in the inbox)."""
        return len(self._streams)

    def stats(self) -> EngineStats:
        """The engine's latest snapshot (empty while loading): `_snapshot_due` says when one is taken."""
        return self._snapshot.replace(num_requests_resumed=self.resumed_requests)

    def not_ready_reason(self) -> str:
        if self.state in (EngineState.NEW, EngineState.LOADING):
            return "the model is loading"
        if self.state == EngineState.RESTARTING:
            return f"the engine loop died and is restarting: {self.error}"
        if self.state == EngineState.DEAD:
            return f"the engine loop died: {self.error}"
        if self._stop.is_set() or self.state == EngineState.STOPPED:
            return "the engine is shutting down"
        return "the engine is not running"

    # -- the engine thread ----------------------------------------------------------------

    def _main(self) -> None:
        try:
            self.engine = self._factory()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("model failed to load: %s", self.error)
            self.state = EngineState.DEAD
            return
        restarts = 0
        while True:
            self._refresh_snapshot()
            self._model_info = self.engine.model_info
            self.state = EngineState.READY
            started = time.monotonic()
            try:
                self._loop()
                break
            except Exception as exc:
                if time.monotonic() - started > RESTART_BUDGET_RESET_S:
                    restarts = 0  # a loop that ran for a long while earns its retries back
                self.error = f"{type(exc).__name__}: {exc}"
                log.error("engine loop died:\n%s", traceback.format_exc())
                fatal = is_fatal_device_error(exc)  # a broken device stays broken: no restart in this process
                self.state = EngineState.DEAD if fatal else EngineState.RESTARTING
                if fatal or self._stop.is_set() or restarts >= self.max_restarts:
                    log.error("engine loop died (%s); giving up", "the device failed" if fatal else f"{restarts + 1} times")
                    self._fail_all_streams(self.error)
                    self.state = EngineState.DEAD
                    return
                restarts += 1
                log.warning("restarting the engine loop (%d of %d)", restarts, self.max_restarts)
                if not self._restart():
                    self._fail_all_streams(self.error)
                    return
                self._resume_streams(f"{ENGINE_NAME} (restart {restarts})")
        self._abort_everything()
        self.state = EngineState.STOPPED

    def _restart(self) -> bool:
        """A fresh engine over the same weights; False (and state dead) where building it fails."""
        try:
            self.test_faults.fire_once("restart")
            self.engine = self.engine.fresh_copy()
            return True
        except Exception as exc:
            self.error = f"the restart failed: {type(exc).__name__}: {exc}"
            log.error("%s\n%s", self.error, traceback.format_exc())
            self.state = EngineState.DEAD
            return False

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.last_loop_at = time.monotonic()
            self.test_faults.fire("loop")
            self._drain_inbox()
            if self.engine.has_work():
                outputs = self.engine.step()
                handed = time.perf_counter()
                self._dispatch(outputs)
                if self._snapshot_due(handed, outputs):
                    self._refresh_snapshot()
                self.engine.step_times.handoff(time.perf_counter() - handed)
            else:
                self._refresh_snapshot()
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()

    def _drain_inbox(self) -> None:
        while True:
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, AddRequest):
                if command.request_id not in self._streams:
                    continue  # aborted before it reached the engine
                try:
                    self.engine.add_request(command.request_id, command.token_ids, command.params, command.resume)
                    self._progress[command.request_id].started = True
                except Exception as exc:
                    self._end_stream(command.request_id, "error", str(exc))
            elif not self.engine.abort(command.request_id):
                self._end_stream(command.request_id, "abort", None)  # never reached the engine

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        items = []
        with self._streams_lock:
            for output in outputs:
                stream = self._streams.get(output.request_id)
                if stream is None:
                    continue
                progress = self._progress.get(output.request_id)
                if progress is not None:
                    progress.record(output)
                    if progress.resumed:
                        output.resumes = [dict(segment) for segment in progress.segments]
                if output.finished:
                    del self._streams[output.request_id]
                    self._progress.pop(output.request_id, None)
                items.append((stream, output))
        deliver(items)

    def _resume_streams(self, engine_name: str) -> None:
        """After a restart: every request the dead loop had taken carries on in the new engine from
        what its client was sent (those still in the inbox reach it as they are)."""
        with self._streams_lock:
            started = [
                (rid, self._progress[rid]) for rid in self._streams if rid in self._progress and self._progress[rid].started
            ]
        for request_id, progress in started:
            try:
                self.engine.add_request(request_id, progress.prompt, progress.params, progress.resume_on(engine_name))
                self.resumed_requests += 1
            except Exception as exc:
                self._end_stream(request_id, "error", f"could not resume after the engine loop died: {exc}")
        log.warning("resumed %d request(s) after the engine loop restarted", len(started))

    def _end_stream(self, request_id: str, reason: str, error: str | None) -> None:
        self._dispatch([final_output(request_id, reason, error)])

    def _abort_everything(self) -> None:
        for request_id in list(self.engine.requests):
            self.engine.abort(request_id)
        self._dispatch(self.engine.step())
        with self._streams_lock:
            leftovers = list(self._streams)
        for request_id in leftovers:
            self._end_stream(request_id, "abort", None)
        self._refresh_snapshot()

    def _fail_all_streams(self, error: str) -> None:
        with self._streams_lock:
            leftovers = list(self._streams)
        for request_id in leftovers:
            self._end_stream(request_id, "error", error)

    def _snapshot_due(self, now: float, outputs: list[RequestOutput]) -> bool:
        """Whether a busy loop's stats must be taken now: SNAPSHOT_EVERY_S has passed, a request ended,
        or the requests running or waiting changed (one that has just started is never missing)."""
        scheduler = self.engine.scheduler
        if (len(scheduler.running), len(scheduler.waiting)) != self._snapshot_load:
            return True
        return now - self._snapshot_at >= SNAPSHOT_EVERY_S or any(output.finished for output in outputs)

    def _refresh_snapshot(self) -> None:
        """The stats readers see (/stats, /health, /metrics, a worker's heartbeat). Taking it costs
        ~25-50 µs of the GIL: a busy loop takes one per SNAPSHOT_EVERY_S, and whenever a request
        ends (so a finished request is never still counted), an idle one every pass."""
        self._snapshot_at = time.perf_counter()
        self._snapshot_load = (len(self.engine.scheduler.running), len(self.engine.scheduler.waiting))
        self._snapshot = self.engine.stats().replace(last_step_at=self.last_loop_at)
