"""EngineWorker: one engine process serving every web process through the channel layer.

It feeds an EngineThread from the shared request channel, streams each request's outputs back
to the channel of the web process that sent it (one message per step per web process), takes
aborts on its own channel, and publishes its stats to the web processes every second (that
heartbeat is how they know it is alive). When it holds a full batch it pulls new requests only
slowly, so an idle engine gets them first. On stop, requests still running get no last output:
the last heartbeat says "stopped", and the web processes resume them on another engine
(serving/remote/client.py), or end them with an error where none takes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import time
from collections import defaultdict
from pathlib import Path

from ...engine.device import gpu_memory
from ...engine.engine_state import EngineState
from ...engine.engine_thread import EngineThread
from ...engine.sample.structured import GrammarError
from . import protocol as wire

log = logging.getLogger("inference.serving.remote.worker")

BUSY_PULL_DELAY_S = 0.25  # with every batch slot taken, wait this long before taking another request


class Outbox:
    """Outputs waiting to go out, grouped per web channel: one send per channel per flush."""

    def __init__(self):
        self._pending: dict[str, list] = defaultdict(list)
        self._ready = asyncio.Event()

    def add(self, channel: str, item: dict) -> None:
        self._pending[channel].append(item)
        self._ready.set()

    def take(self) -> dict[str, list]:
        batch, self._pending = self._pending, defaultdict(list)
        self._ready.clear()
        return batch

    async def wait(self) -> None:
        await self._ready.wait()

    def __bool__(self) -> bool:
        return bool(self._pending)


class EngineWorker:
    def __init__(
        self,
        engine_thread: EngineThread,
        *,
        layer,
        engine_id: str | None = None,
        heartbeat_file: str | None = None,
        model_name: str | None = None,
        purge: bool = True,
    ):
        """`model_name`: the model this engine serves, whose request channel it takes from
        (protocol.request_channel); `purge`: this worker deletes expired stored responses (one per process)."""
        self.engine_thread = engine_thread
        self.model_name = model_name
        self.request_channel = wire.request_channel(model_name)
        self.purge = purge
        self.layer = layer
        self.engine_id = engine_id or self.default_id()
        self.heartbeat_file = Path(heartbeat_file) if heartbeat_file else None
        self.channel: str | None = None
        self.accepted = 0
        self.stopping = False
        self._owners: dict[str, str] = {}  # request id -> the web channel waiting for it
        self._slots: dict[str, int] = {}  # request id -> the batch slots it takes (its n)
        self._client_aborts: set[str] = set()
        self._forwarders: set[asyncio.Task] = set()
        self._slot_freed = asyncio.Event()
        self._outbox = Outbox()

    @staticmethod
    def default_id() -> str:
        """An engine's id where MINIVLLM_ENGINE_ID sets none: its host and process."""
        return f"{socket.gethostname()}-{os.getpid()}"

    # ---- the whole life of the worker -----------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> int:
        """Runs until `stop` is set or the engine dies; returns the process exit code."""
        self.channel = await self.layer.new_channel()
        publisher = asyncio.create_task(self._publish_forever())
        try:
            while self.engine_thread.state in (EngineState.NEW, EngineState.LOADING) and not stop.is_set():
                await asyncio.sleep(0.05)
            if not self.engine_thread.ready:
                log.error("engine %s did not start: %s", self.engine_id, self.engine_thread.error)
                return 0 if stop.is_set() else 1
            log.info("engine %s ready: taking requests from %s", self.engine_id, self.request_channel)
            tasks = [
                asyncio.create_task(self._pull_forever()),
                asyncio.create_task(self._control_forever()),
                asyncio.create_task(self._flush_forever()),
            ]
            if self.purge:
                tasks.append(asyncio.create_task(purge_stored_responses_forever()))
            waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(self._wait_dead())]
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            tasks[0].cancel()  # take no new requests
            await self._stop_engine()
            for task in tasks[1:] + waiters:
                task.cancel()
            return 1 if self.engine_thread.state == EngineState.DEAD else 0
        finally:
            publisher.cancel()
            await self._publish()  # the last heartbeat says "stopped": web processes drop us at once

    async def _stop_engine(self) -> None:
        self.stopping = True
        log.info("engine %s stopping: %d request(s) in flight", self.engine_id, len(self._owners))
        await asyncio.get_running_loop().run_in_executor(None, self.engine_thread.shutdown)
        if self._forwarders:
            await asyncio.wait(list(self._forwarders), timeout=10)
        await self._flush()

    async def _wait_dead(self) -> None:
        while self.engine_thread.ready:
            await asyncio.sleep(0.2)

    # ---- requests in -----------------------------------------------------------------------------

    async def _pull_forever(self) -> None:
        while True:
            engine = self.engine_thread.engine
            if engine is not None and sum(self._slots.values()) >= engine.num_slots:
                self._slot_freed.clear()
                try:
                    await asyncio.wait_for(self._slot_freed.wait(), BUSY_PULL_DELAY_S)
                except TimeoutError:
                    pass
            message = await wire.receive(self.layer, self.request_channel)
            if message.get("type") == wire.SUBMIT:
                await self._accept(message)

    async def _accept(self, message: dict) -> None:
        request_id, reply = message["request_id"], message["reply_channel"]
        if request_id in self._owners:
            return  # a redelivered message: we already run it
        try:
            params = wire.params_from_wire(message["params"])
            if params.structured is not None:  # compiled into this engine's cache off its loop
                await asyncio.to_thread(self.engine_thread.compile_grammar, params.structured)
            if params.tool_trigger is not None:
                params = await self._with_tool_trigger(params)
            # a request another engine died serving carries on from what its client was sent
            stream = self.engine_thread.submit(request_id, message["prompt"], params, resume=message.get("resume"))
        except Exception as exc:
            await self._send(
                reply,
                {
                    "type": wire.REJECTED,
                    "request_id": request_id,
                    "engine_id": self.engine_id,
                    "kind": type(exc).__name__,
                    "message": str(exc),
                },
            )
            return
        self.accepted += 1
        self._owners[request_id] = reply
        self._slots[request_id] = params.n
        await self._send(
            reply, {"type": wire.ACCEPTED, "request_id": request_id, "engine_id": self.engine_id, "engine_channel": self.channel}
        )
        task = asyncio.create_task(self._forward(request_id, reply, stream))
        self._forwarders.add(task)
        task.add_done_callback(self._forwarders.discard)

    async def _with_tool_trigger(self, params):
        """The tool-call trigger's grammar compiled off the loop; a grammar that fails here drops
        the trigger (the reply stays free) rather than the request."""
        try:
            await asyncio.to_thread(self.engine_thread.compile_grammar, params.tool_trigger["grammar"])
            return params
        except GrammarError as exc:
            log.warning("engine %s: tool-call grammar dropped, the reply stays free: %s", self.engine_id, exc)
            return dataclasses.replace(params, tool_trigger=None)

    async def _control_forever(self) -> None:
        while True:
            message = await wire.receive(self.layer, self.channel)
            if message.get("type") == wire.ABORT and message["request_id"] in self._owners:
                self._client_aborts.add(message["request_id"])
                self.engine_thread.abort(message["request_id"])

    # ---- outputs out -----------------------------------------------------------------------------

    async def _forward(self, request_id: str, reply: str, stream) -> None:
        try:
            async for out in stream:
                if out.finished and out.finish_reason == "abort" and self.stopping and request_id not in self._client_aborts:
                    return  # not an end: the web process resumes it on another engine when our last heartbeat says "stopped"
                self._outbox.add(reply, wire.output_to_wire(out))
        finally:
            self._owners.pop(request_id, None)
            self._slots.pop(request_id, None)
            self._client_aborts.discard(request_id)
            self._slot_freed.set()

    async def _flush_forever(self) -> None:
        while True:
            await self._outbox.wait()
            await self._flush()

    async def _flush(self) -> None:
        for reply, outputs in self._outbox.take().items():
            message = {
                "type": wire.OUTPUTS,
                "engine_id": self.engine_id,
                "engine_channel": self.channel,
                "now": time.monotonic(),
                "outputs": outputs,
            }
            if not await self._send(reply, message):
                self._drop_web_channel(reply)

    def _drop_web_channel(self, reply: str) -> None:
        """That web process is gone or stuck (its channel is full): stop generating for it."""
        for request_id, owner in list(self._owners.items()):
            if owner == reply:
                self._client_aborts.add(request_id)
                self.engine_thread.abort(request_id)

    async def _send(self, channel: str, message: dict) -> bool:
        try:
            await self.layer.send(channel, message)
            return True
        except Exception as exc:
            log.warning("engine %s could not send to %s: %s", self.engine_id, channel, exc)
            return False

    # ---- heartbeat -------------------------------------------------------------------------------

    async def _publish_forever(self) -> None:
        while True:
            await self._publish()
            await asyncio.sleep(wire.HEARTBEAT_S)

    async def _publish(self) -> None:
        try:
            await self.layer.group_send(wire.STATS_GROUP, self.heartbeat())
        except Exception as exc:
            log.warning("engine %s could not publish its stats: %s", self.engine_id, exc)
        if self.heartbeat_file is not None and self.engine_thread.ready and not self.stopping:
            self.heartbeat_file.touch()

    def heartbeat(self) -> dict:
        engine_thread = self.engine_thread
        state = EngineState.STOPPING if self.stopping and engine_thread.state == EngineState.READY else engine_thread.state
        engine = engine_thread.engine if engine_thread.state == EngineState.READY else None
        stats = _plain({**engine_thread.stats().to_dict(), **_gpu_memory(engine.device)}) if engine is not None else {}
        return {
            "type": wire.STATS,
            "engine_id": self.engine_id,
            "engine_channel": self.channel,
            "model_name": self.model_name,
            "state": str(EngineState.LOADING if state == EngineState.NEW else state),  # plain str on the wire
            "now": time.monotonic(),
            "info": {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "accepted": self.accepted,
                "in_flight": len(self._owners),
                "max_queue": engine_thread.max_queue,
                "model": engine_thread.model_info.to_wire() if engine_thread.model_info is not None else None,
                "error": engine_thread.error,
            },
            "stats": stats,
        }


async def purge_stored_responses_forever(interval_s: float | None = None) -> None:
    """Deletes expired stored Responses API responses now, then every `interval_s` (hourly): in a
    worker thread, so the database call never holds up the loop that streams outputs; a database
    error is logged by purge_logged, never fatal. Imported here, not at the top: this module loads
    without Django's apps ready."""
    from ... import stored_responses

    while True:
        await asyncio.to_thread(stored_responses.purge_logged)
        await asyncio.sleep(stored_responses.PURGE_INTERVAL_S if interval_s is None else interval_s)


def _gpu_memory(device: str) -> dict:
    """Measured here, where the GPU is; only the GPU keys (null on CPU), so fleets can sum them."""
    measured = gpu_memory(device)
    return {key: measured[key] for key in ("gpu_memory_used_mb", "gpu_memory_total_mb")}


def _plain(stats: dict) -> dict:
    """msgpack takes only plain types; numpy/torch scalars become floats."""
    return json.loads(json.dumps(stats, default=float))
