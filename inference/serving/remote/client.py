"""RemoteEngine: a web process's engine when the engines run as `manage.py runengine` workers.

It answers the views exactly as EngineThread does (ready/state/submit/abort/stats/shutdown), so
views, jobs, selectors and metrics do not know which one they talk to. Requests go to the shared
request channel (one engine takes each); outputs come back on this process's own channel. The
channel I/O runs on an event loop in a thread of its own (Daphne's loop is not running yet when
the engine starts at import), and outputs reach each view's loop with call_soon_threadsafe.
The tokenizer is loaded here too: chat templates, tokenizing and the context-length check
(serving/submission.py, against `model_info`) happen before a request leaves the process.

An engine that dies (its heartbeat stops for MINIVLLM_ENGINE_TIMEOUT seconds, or it says it is
stopping) loses no request: each request it held, queued or running, is sent again with the
tokens its client already has (engine/resume.py's Progress, kept here as the outputs pass), and
whichever live engine takes it carries on from there; the client's stream goes on with no gap and
no repeat. Where no engine takes it within MINIVLLM_ENGINE_ACCEPT_TIMEOUT seconds it ends with
the error it would have ended with.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from ...engine.config import EngineConfig
from ...engine.engine_state import EngineState, ModelInfo
from ...engine.engine_stats import EngineStats
from ...engine.errors import EngineNotReadyError
from ...engine.request_streams import RequestStream, check_can_submit, deliver, final_output
from ...engine.resume import Progress
from ...engine.sample.sampling_params import SamplingParams
from ...engine.sample.structured import Grammars
from ...engine.transformers_lock import TRANSFORMERS_LOCK
from . import protocol as wire
from .fleet import EngineFleet

log = logging.getLogger("inference.serving.remote")

WATCH_INTERVAL_S = 0.25
REJOIN_INTERVAL_S = 10.0  # group membership expires, and a Redis restart forgets it


@dataclass
class _InFlight:
    stream: RequestStream
    submitted_at: float
    progress: Progress
    engine_id: str | None = None
    engine_channel: str | None = None
    aborted: bool = False
    lost: tuple[str, ...] = ()  # engines that died holding it: their late outputs are dropped
    lost_because: str | None = None  # why the last one was lost (the error if no engine takes it over)
    resume: list | None = None  # what the SUBMIT carried when it was sent again (engine/resume.py)


class RemoteEngine:
    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        max_queue: int = 64,
        layer=None,
        engine_timeout: float = 5.0,
        accept_timeout: float = 30.0,
        tokenizer=None,
        model_name: str | None = None,
    ):
        """`model_name`: the model this client's requests go to (its own request channel; only the
        heartbeats of engines serving it count)."""
        self.config = config or EngineConfig()
        self.model_name = model_name
        self.request_channel = wire.request_channel(model_name)
        self.default_max_queue = max_queue
        self.fleet = EngineFleet(engine_timeout)
        self.accept_timeout = accept_timeout
        self.channel: str | None = None
        self.tokenizer = tokenizer
        self._layer = layer
        self._error: str | None = None
        self._stopped = False
        self._requests: dict[str, _InFlight] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._grammars: Grammars | None = None  # made on the first constrained request
        self.resumed_requests = 0  # sent again after their engine died

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> RemoteEngine:
        self._thread = threading.Thread(target=self._main, name="minivllm-remote", daemon=True)
        self._thread.start()
        self._started.wait(30)
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        """Every in-flight stream ends with finish_reason "abort" (and the engines are told)."""
        if self._stopped:
            return
        self._stopped = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout)
            except Exception:
                log.exception("remote engine shutdown")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait_ready(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready and self.state not in (EngineState.DEAD, EngineState.STOPPED):
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return self.ready

    @property
    def state(self) -> EngineState:
        if self._stopped:
            return EngineState.STOPPED
        if self._error is not None or (self._thread is not None and not self._thread.is_alive()):
            return EngineState.DEAD
        if self.fleet.ready() and self.tokenizer is not None:
            return EngineState.READY
        if self.tokenizer is None or any(v.state == EngineState.LOADING for v in self.fleet.views()):
            return EngineState.LOADING
        return EngineState.NO_ENGINE

    @property
    def ready(self) -> bool:
        return self.state == EngineState.READY

    @property
    def error(self) -> str | None:
        if self._error is not None:
            return self._error
        return self.not_ready_reason() if self.state == EngineState.NO_ENGINE else None

    def not_ready_reason(self) -> str:
        state = self.state
        if state == EngineState.LOADING:
            return "the model is loading" if self.tokenizer is not None else "the tokenizer is loading"
        if state == EngineState.DEAD:
            return f"the engine client died: {self._error or 'its thread stopped'}"
        if state == EngineState.STOPPED:
            return "the engine is shutting down"
        if state == EngineState.NO_ENGINE:
            return "no engine worker is running (start `python manage.py runengine`)"
        return "the engine is not running"

    # ---- what views read about the model -------------------------------------------------------

    @property
    def model_info(self) -> ModelInfo | None:
        """The served model's facts from the ready workers: the shortest context among them."""
        wired = [v.info["model"] for v in self.fleet.ready() if v.info.get("model")]
        if not wired or self.tokenizer is None:
            return None
        return ModelInfo.of_fleet(wired, self.tokenizer)

    @property
    def max_queue(self) -> int:
        queues = [v.info.get("max_queue") or 0 for v in self.fleet.ready()]
        return sum(queues) or self.default_max_queue

    def stats(self) -> EngineStats:
        stats = self.fleet.aggregate()
        return stats.replace(num_requests_resumed=(stats.num_requests_resumed or 0) + self.resumed_requests)

    def inject_fault(self, kind: str, hook) -> None:
        raise NotImplementedError("fault injection needs the in-process engine (MINIVLLM_ENGINE=local)")

    def num_in_flight(self) -> int:
        """Requests sent whose streams have not ended, wherever they run."""
        return len(self._requests)

    def num_waiting(self) -> int:
        with self._lock:
            unaccepted = sum(1 for r in self._requests.values() if r.engine_id is None)
        return sum(v.stats.waiting or 0 for v in self.fleet.ready()) + unaccepted

    # ---- requests (any thread with a running event loop) ------------------------------------

    def submit(self, request_id: str, token_ids: list[int], params: SamplingParams, resume: list | None = None) -> RequestStream:
        """Sends a prompt of token ids, checked by the caller against model_info (the smallest
        context and pool among the ready workers), to whichever worker takes it first."""
        check_can_submit(self)
        token_ids = list(token_ids)
        stream = RequestStream(self, request_id)
        with self._lock:
            if request_id in self._requests:
                raise ValueError(f"request id {request_id!r} is already in use")
            req = _InFlight(stream, time.monotonic(), Progress(token_ids, params, "?", resume), resume=resume)
            self._requests[request_id] = req
        self._call(self._send, self.request_channel, self._submit_message(request_id, req, resume))
        return stream

    def _submit_message(self, request_id: str, req: _InFlight, resume: list | None = None) -> dict:
        message = {
            "type": wire.SUBMIT,
            "request_id": request_id,
            "prompt": req.progress.prompt,
            "params": wire.params_to_wire(req.progress.params),
            "reply_channel": self.channel,
        }
        if resume is not None:
            message["resume"] = resume
        return message

    def compile_grammar(self, spec: dict) -> None:
        """Checks a request's grammar here, against this process's tokenizer, before it is sent
        (the worker compiles it again into its own cache)."""
        info = self.model_info
        if info is None:
            raise EngineNotReadyError(self.not_ready_reason())
        with self._lock:
            if self._grammars is None:
                eos = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
                self._grammars = Grammars(self.tokenizer, info.vocab_size or len(self.tokenizer), eos)
        self._grammars.compile(spec)

    def abort(self, request_id: str) -> None:
        self._call(self._abort, request_id)

    # ---- the client's own loop ---------------------------------------------------------------

    def _call(self, coroutine_fn, *args) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(coroutine_fn(*args)))
        except RuntimeError:
            pass  # the loop closed meanwhile

    def _main(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        except Exception as exc:
            self._error = f"{type(exc).__name__}: {exc}"
            log.exception("remote engine client died")
            self._fail_all(self._error)
        finally:
            self._started.set()
            self._loop.close()

    async def _serve(self) -> None:
        if self._layer is None:
            from channels.layers import channel_layers

            self._layer = channel_layers.make_backend("default")
        self._closing = asyncio.Event()
        self.channel = await self._layer.new_channel()
        self._started.set()
        log.info("waiting for engine workers on %s (channel %s)", self.request_channel, self.channel)
        tasks = [asyncio.create_task(self._receive_forever()), asyncio.create_task(self._watch_forever())]
        if self.tokenizer is None:
            tasks.append(asyncio.create_task(self._load_tokenizer()))
        try:
            await self._closing.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _load_tokenizer(self) -> None:
        from ...engine.loader import resolve_source

        def load():
            with TRANSFORMERS_LOCK:  # several models' clients start at once (engine/transformers_lock.py)
                from transformers import AutoTokenizer

                source = resolve_source(self.config.model)
                return AutoTokenizer.from_pretrained(source.path, **source.hf_kwargs())

        try:
            self.tokenizer = await asyncio.get_running_loop().run_in_executor(None, load)
        except Exception as exc:
            self._error = f"could not load the tokenizer: {type(exc).__name__}: {exc}"
            log.error(self._error)

    async def _close(self) -> None:
        with self._lock:
            pending = list(self._requests.items())
        for request_id, req in pending:
            if req.engine_channel:
                await self._send(req.engine_channel, {"type": wire.ABORT, "request_id": request_id})
        self._fail_all(None, reason="abort")
        try:
            await self._layer.group_discard(wire.STATS_GROUP, self.channel)
        except Exception:
            log.debug("group_discard failed", exc_info=True)
        self._closing.set()

    async def _send(self, channel: str, message: dict) -> None:
        try:
            await self._layer.send(channel, message)
        except Exception as exc:
            log.warning("could not send %s to %s: %s", message.get("type"), channel, exc)
            request_id = message.get("request_id")
            if message["type"] == wire.SUBMIT and request_id:
                self._end(request_id, "error", f"could not reach the engines: {exc}")

    async def _receive_forever(self) -> None:
        while True:
            message = await wire.receive(self._layer, self.channel)
            try:
                self._handle(message)
            except Exception:
                log.exception("bad message from an engine: %r", message.get("type"))

    def _handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == wire.STATS:
            if message.get("model_name") != self.model_name:
                return  # an engine serving another model
            view = self.fleet.update(message)
            if view.state in (EngineState.STOPPED, EngineState.DEAD):
                self._fail_engine(view.engine_id, f"engine {view.engine_id} shut down before the request finished")
        elif kind == wire.ACCEPTED:
            self._accepted(message)
        elif kind == wire.REJECTED:
            req = self._requests.get(message["request_id"])
            if req is not None and req.engine_id in (None, message.get("engine_id")):
                self._end(message["request_id"], "error", message.get("message") or "the engine refused the request")
        elif kind == wire.OUTPUTS:
            self._outputs(message)

    def _accepted(self, message: dict) -> None:
        request_id, engine_channel = message["request_id"], message["engine_channel"]
        req = self._requests.get(request_id)
        # the client left before an engine took it; or a second engine got the same request
        # (channels-redis can redeliver a message when receivers race): the first one keeps it
        duplicate = req is not None and (
            (req.engine_id is not None and req.engine_id != message["engine_id"]) or message["engine_id"] in req.lost
        )
        if req is None or req.aborted or duplicate:
            asyncio.get_running_loop().create_task(self._send(engine_channel, {"type": wire.ABORT, "request_id": request_id}))
        if req is not None and not duplicate:
            req.engine_id, req.engine_channel = message["engine_id"], engine_channel
            req.progress.moved(message["engine_id"])

    def _outputs(self, message: dict) -> None:
        offset = time.monotonic() - message["now"]
        items = []
        for data in message["outputs"]:
            out = wire.output_from_wire(data, clock_offset=offset)
            with self._lock:
                req = self._requests.get(out.request_id)
                if req is not None and (req.engine_id not in (None, message["engine_id"]) or message["engine_id"] in req.lost):
                    continue  # a duplicate's outputs (it has been told to abort), or a dead engine's last ones
                if req is not None:
                    req.progress.record(out)
                    if req.progress.resumed:
                        out.resumes = [dict(segment) for segment in req.progress.segments]
                if req is not None and out.finished:
                    del self._requests[out.request_id]
            if req is None:
                if not out.finished:  # nobody here waits for it any more: free the engine's slot
                    asyncio.get_running_loop().create_task(
                        self._send(message["engine_channel"], {"type": wire.ABORT, "request_id": out.request_id})
                    )
                continue
            items.append((req.stream, out))
        deliver(items)

    async def _abort(self, request_id: str) -> None:
        req = self._requests.get(request_id)
        if req is None or req.aborted:
            return
        req.aborted = True
        if req.engine_channel:
            await self._send(req.engine_channel, {"type": wire.ABORT, "request_id": request_id})

    async def _watch_forever(self) -> None:
        """Ends the streams of engines that went silent, and requests no engine picked up."""
        join_at = 0.0
        while True:
            if time.monotonic() >= join_at:  # (re)join the heartbeat group; retry soon if Redis is down
                try:
                    await self._layer.group_add(wire.STATS_GROUP, self.channel)
                    join_at = time.monotonic() + REJOIN_INTERVAL_S
                except Exception as exc:
                    log.warning("could not join %s: %s", wire.STATS_GROUP, exc)
                    join_at = time.monotonic() + 1.0
            await asyncio.sleep(WATCH_INTERVAL_S)
            for view in self.fleet.prune():
                if view.state not in (EngineState.STOPPED, EngineState.DEAD):
                    log.warning("engine %s stopped responding (no heartbeat for %.0fs)", view.engine_id, self.fleet.timeout)
                self._fail_engine(view.engine_id, f"engine {view.engine_id} stopped responding")
            now = time.monotonic()
            with self._lock:
                items = list(self._requests.items())
            for request_id, req in items:
                if req.engine_id is None and now - req.submitted_at > self.accept_timeout:
                    taken = f"no engine took the request within {self.accept_timeout:.0f}s"
                    self._end(request_id, "error", f"{req.lost_because}; {taken} to resume it" if req.lost_because else taken)
                elif req.engine_id and self.fleet.get(req.engine_id) is None and now - req.submitted_at > self.fleet.timeout:
                    await self._resume(request_id, req, f"engine {req.engine_id} is gone")

    def _fail_engine(self, engine_id: str, error: str) -> None:
        """The engine died or stopped: each request it held carries on elsewhere. Requests no engine
        has accepted yet go out again too: the dead one may have taken one off the shared channel
        and died before accepting it (a second copy is harmless: the first engine to accept keeps it)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            lost = [(rid, req) for rid, req in self._requests.items() if req.engine_id == engine_id]
            unaccepted = [(rid, req) for rid, req in self._requests.items() if req.engine_id is None and not req.aborted]
        for request_id, req in lost:
            loop.create_task(self._resume(request_id, req, error))
        for request_id, req in unaccepted:
            loop.create_task(self._send(self.request_channel, self._submit_message(request_id, req, req.resume)))

    async def _resume(self, request_id: str, req: _InFlight, error: str) -> None:
        """Sends the request again with what its client was sent; the next engine to take it carries
        on from there (a client already gone ends it instead)."""
        if req.engine_id is None or self._requests.get(request_id) is not req:
            return  # already being resumed, or ended meanwhile
        if req.aborted:
            self._end(request_id, "abort", None)
            return
        req.lost += (req.engine_id,)
        req.lost_because = error
        req.engine_id = req.engine_channel = None
        req.submitted_at = time.monotonic()  # the accept timeout bounds the wait for a live engine
        self.resumed_requests += 1
        log.warning(
            "resuming %s (%s): %d token(s) delivered so far", request_id, error, sum(map(len, req.progress.delivered.values()))
        )
        req.resume = req.progress.resume_on("?")
        await self._send(self.request_channel, self._submit_message(request_id, req, req.resume))

    def _fail_all(self, error: str | None, reason: str = "error") -> None:
        with self._lock:
            ids = list(self._requests)
        for request_id in ids:
            self._end(request_id, reason, error)

    def _end(self, request_id: str, reason: str, error: str | None) -> None:
        with self._lock:
            req = self._requests.pop(request_id, None)
        if req is not None:
            deliver([(req.stream, final_output(request_id, reason, error))])
