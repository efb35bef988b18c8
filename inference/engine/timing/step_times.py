"""Where a decode step's time goes: the model's forward against everything the loop does around it.

A small model's forward is a few milliseconds of weight reads; what the loop adds around it
(scheduling, the step's inputs, sampling, writing and detokenizing the tokens, handing them to
the server) sets the floor for every small model, every verification and every GPU step. Each
step without a prefill chunk (a chunk's forward would swamp the rest) adds its phases here: the
dashboard shows their recent averages and the overhead (all but the forward), and the bench
(`bench/step_split.py`) reads the totals over a run.
"""

from __future__ import annotations

import time

# In a step's order. `forward`: the model (on CUDA, launched: its wait lands in `sample`'s transfer).
PHASES = ("schedule", "inputs", "forward", "sample", "outputs", "detokenize", "handoff")
RECENT_RATE = 0.05  # weight of each step in the recent averages (~20 steps)


class StepTimes:
    """Per phase: seconds summed over the counted steps, and a recent average in milliseconds."""

    def __init__(self):
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.recent_ms = dict.fromkeys(PHASES, 0.0)
        self.steps = 0
        self._step = dict.fromkeys(PHASES, 0.0)
        self._mark = 0.0
        self._last_counted = False

    def begin(self) -> None:
        """A step starts: its phases count from now."""
        self._step = dict.fromkeys(PHASES, 0.0)
        self._mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        """The time since the last mark was spent in `phase`."""
        now = time.perf_counter()
        self._step[phase] += now - self._mark
        self._mark = now

    def move(self, seconds: float, source: str, destination: str) -> None:
        """Seconds measured inside one phase that belong to another (detokenizing, inside outputs)."""
        self._step[source] -= seconds
        self._step[destination] += seconds

    def end(self, counted: bool) -> None:
        """The step's phases are done; `counted`: it had no prefill chunk."""
        self._last_counted = counted
        if counted:
            self._commit(self._step)

    def handoff(self, seconds: float) -> None:
        """The loop's time after the step: its outputs handed to the server, the snapshot taken."""
        if self._last_counted:
            self._commit({"handoff": seconds}, new_step=False)
            self._last_counted = False

    def _commit(self, phases: dict, new_step: bool = True) -> None:
        self.steps += new_step
        rate = 1.0 if self.steps == 1 else RECENT_RATE
        for phase, seconds in phases.items():
            self.totals[phase] += seconds
            self.recent_ms[phase] += rate * (1000 * seconds - self.recent_ms[phase])

    def snapshot(self) -> dict:
        """For the engine's stats: the recent averages (ms), their overhead, and the run's totals."""
        recent = {phase: round(ms, 3) for phase, ms in self.recent_ms.items()}
        return {
            "recent_ms": recent,
            "overhead_ms": round(sum(ms for phase, ms in self.recent_ms.items() if phase != "forward"), 3),
            "totals_s": dict(self.totals),
            "steps": self.steps,
        }


def merged(snapshots) -> dict | None:
    """A fleet's step times from its workers' snapshots: totals and steps summed, the recent
    averages weighted by each worker's steps (None where no worker has counted a step)."""
    counted = [s for s in snapshots if s and s.get("steps")]
    if not counted:
        return None
    steps = sum(s["steps"] for s in counted)
    recent = {p: sum(s["recent_ms"][p] * s["steps"] for s in counted) / steps for p in PHASES}
    return {
        "recent_ms": {p: round(ms, 3) for p, ms in recent.items()},
        "overhead_ms": round(sum(ms for p, ms in recent.items() if p != "forward"), 3),
        "totals_s": {p: sum(s["totals_s"][p] for s in counted) for p in PHASES},
        "steps": steps,
    }
