"""What a start spends before the engine is ready, part by part, in one log line.

A server is ready when `/health` says 200, which needs the model loaded. Before that the process
imports torch and Django, reads the GGUF's header, maps (or packs) its weights, waits for the
tokenizer read beside them, builds the fused C++ step, and allocates the KV pool. Each is timed
here so the line that ends the load says which one a slow start spent its seconds on.
"""

from __future__ import annotations

import os
import time

import psutil

_loads = 0  # loads this process has timed: only the first is measured from the process's start


class StartPhases:
    """Seconds each part of a load took, in order (`lap` after each)."""

    def __init__(self):
        global _loads
        self.phases: list[tuple[str, float]] = []
        self._mark = self._started = time.perf_counter()
        self.first = _loads == 0  # a later load (a model switch) is not the process's start
        _loads += 1
        self.before_load = process_age()  # the interpreter, the imports, Django: what came before the load

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases.append((phase, now - self._mark))
        self._mark = now

    def lap_rest(self, phase: str) -> None:
        """The time since the last lap, where there is any to speak of (a path that timed no parts of its own)."""
        if not self.phases or time.perf_counter() - self._mark >= 0.005:
            self.lap(phase)

    def line(self) -> str:
        """The process's first load: '3.1 s since the process started: 1.5 s before the load (imports,
        Django), then GGUF header 0.03 s, ...'; a later one: 'a load of 1.2 s: GGUF header 0.03 s, ...'."""
        parts = ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in self.phases)
        if not self.first:
            return f"a load of {time.perf_counter() - self._started:.2f} s: {parts}"
        before = f"{self.before_load:.2f} s before the load (imports, Django)"
        return f"{process_age():.2f} s since the process started: {before}, then {parts}"


def process_age() -> float:
    """Seconds since this process started, on the kernel's one clock: /proc/uptime less the
    process's start in clock ticks (psutil's create_time adds the boot time in whole seconds)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return max(0.0, float(uptime.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return max(0.0, time.time() - psutil.Process().create_time())
