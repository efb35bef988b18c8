"""What both engine clients (the in-process EngineThread, the scale-out RemoteEngine) do the same
way with a request's outputs: the async stream a view reads, the checks before a request is
taken, the final output that ends a stream the engine never finished, and delivery from the
client's own thread onto each stream's event loop (one `call_soon_threadsafe` per loop for all
of its outputs: one per token would cost several times more)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from .errors import EngineNotReadyError, QueueFullError
from .outputs import RequestOutput


class RequestStream:
    """Async iterator over one request's outputs; ends after the finished one."""

    def __init__(self, engine_client, request_id: str):
        self.engine_client = engine_client
        self.request_id = request_id
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.finished = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        output = await self.queue.get()
        self.finished = output.finished
        return output

    def abort(self) -> None:
        if not self.finished:
            self.engine_client.abort(self.request_id)


def check_can_submit(engine_client) -> None:
    """The submit preamble: EngineNotReadyError or QueueFullError when a request cannot be taken now."""
    if not engine_client.ready:
        raise EngineNotReadyError(engine_client.not_ready_reason())
    if engine_client.num_waiting() >= engine_client.max_queue:
        raise QueueFullError(f"the waiting queue is full ({engine_client.max_queue} requests)")


def final_output(request_id: str, reason: str, error: str | None) -> RequestOutput:
    """The output that ends a stream the engine did not finish (an abort, an error, a lost worker)."""
    return RequestOutput(request_id, "", [], finished=True, finish_reason=reason, error=error)


def deliver(items: list[tuple[RequestStream, RequestOutput]]) -> None:
    """Puts each output on its stream, from any thread: one call per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
    for stream, output in items:
        by_loop[stream.loop].append((stream.queue, output))
    for loop, outputs in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, outputs)
        except RuntimeError:
            pass  # that event loop has closed; nobody is listening


def _put_all(outputs) -> None:
    for queue, output in outputs:
        queue.put_nowait(output)
