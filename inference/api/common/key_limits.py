"""Per-key concurrency: one API key may hold at most MINIVLLM_MAX_CONCURRENT_PER_KEY requests at
once in this process (429 with Retry-After above it), so one client cannot fill every batch slot
and the waiting queue. Without keys there is no per-caller limit (the queue bound still applies).
"""

from __future__ import annotations

import threading
import weakref

from django.conf import settings

from .errors import ApiError

_lock = threading.Lock()
_in_flight: dict[str, int] = {}


class Slot:
    """One request's share of its key's concurrency; released exactly once."""

    def __init__(self, label: str | None):
        self.label = label
        self.held = False  # a streaming response owns the release
        self._released = False

    def release(self) -> None:
        with _lock:
            if self._released or self.label is None:
                self._released = True
                return
            self._released = True
            left = _in_flight.get(self.label, 1) - 1
            if left > 0:
                _in_flight[self.label] = left
            else:
                _in_flight.pop(self.label, None)

    def release_unless_held(self) -> None:
        if not self.held:
            self.release()

    def hold(self, generator):
        """Hands the release to a streaming body: at its end, or when it is dropped unstarted."""
        self.held = True

        async def body():
            try:
                async for chunk in generator:
                    yield chunk
            finally:
                self.release()

        wrapped = body()
        weakref.finalize(wrapped, self.release)
        return wrapped


def acquire(caller) -> Slot:
    if caller is None:
        return Slot(None)
    limit = settings.MINIVLLM_MAX_CONCURRENT_PER_KEY
    with _lock:
        count = _in_flight.get(caller.label, 0)
        if limit > 0 and count >= limit:
            raise ApiError(
                429,
                f"too many concurrent requests for this API key (limit {limit}); retry when one finishes",
                code="concurrency_limit_exceeded",
                headers={"Retry-After": "1"},
            )
        _in_flight[caller.label] = count + 1
    return Slot(caller.label)


def in_flight(label: str) -> int:
    with _lock:
        return _in_flight.get(label, 0)
