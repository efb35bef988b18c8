"""What a start spends before the engine is ready, part by part, in one log line.

A server is ready when `/health` says 200, which needs the model loaded. Before that the process
imports torch and Django, reads the GGUF's header, maps (or packs) its weights, waits for the
tokenizer read beside them, builds the fused C++ step, and allocates the KV pool. Each is timed
here so the line that ends the load says which one a slow start spent its seconds on.
"""

from __future__ import annotations

import time

import psutil


class StartPhases:
    """Seconds each part of a load took, in order (`lap` after each)."""

    def __init__(self):
        self.phases: list[tuple[str, float]] = []
        self._mark = time.perf_counter()
        self.before_load = process_age()  # the interpreter, the imports, Django: what came before the load

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases.append((phase, now - self._mark))
        self._mark = now

    def line(self) -> str:
        """'3.1 s since the process started: 1.5 s before the load (imports, Django), then GGUF header 0.03 s, ...'."""
        parts = ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in self.phases)
        return f"{process_age():.2f} s since the process started: {self.before_load:.2f} s before the load (imports, Django), then {parts}"


def process_age() -> float:
    """Seconds since this process was created (the kernel's clock, in 10 ms ticks)."""
    return max(0.0, time.time() - psutil.Process().create_time())
