"""Where decode steps' time goes (engine/timing/step_times.py): every step without a prefill chunk is
counted by phase, the loop's hand-off after it too, and the overhead is all but the forward."""

from __future__ import annotations

import asyncio

from inference.engine.engine_thread import EngineThread
from inference.engine.timing.step_times import PHASES, StepTimes, merged
from tests.support.engine_helpers import engine_for, greedy


def test_decode_steps_are_split_by_phase_and_prefill_steps_are_left_out(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, speculative="off")
    engine.add_request("split", engine.tokenize("where does a step's time go"), greedy(6))
    engine.step()  # the prompt's step: its forward would swamp the loop's own time
    assert engine.step_times.steps == 0
    while engine.has_work():
        engine.step()
    times = engine.step_times.snapshot()
    assert times["steps"] == 5  # the five decode steps after the first token
    for phase in ("schedule", "inputs", "forward", "sample", "outputs", "detokenize"):
        assert times["totals_s"][phase] > 0, phase
    assert times["totals_s"]["handoff"] == 0  # no loop around this engine: nothing handed off
    recent = times["recent_ms"]
    assert abs(times["overhead_ms"] - (sum(recent.values()) - recent["forward"])) < 1e-2


def test_the_loops_handoff_is_counted_with_the_step_before_it(tiny_hf, smollm_tokenizer):
    thread = EngineThread(engine_factory=lambda: engine_for(tiny_hf, smollm_tokenizer, speculative="off")).start()
    try:
        assert thread.wait_ready(60)

        async def run():
            stream = thread.submit("handed", thread.engine.tokenize("hand the tokens over"), greedy(8))
            return [output async for output in stream]

        outputs = asyncio.run(run())
        assert outputs[-1].finished
        times = thread.engine.step_times.snapshot()
        assert times["steps"] >= 6 and times["totals_s"]["handoff"] > 0
        assert set(times["recent_ms"]) == set(PHASES)
    finally:
        thread.shutdown()


def test_a_moved_interval_leaves_the_step_total_unchanged():
    times = StepTimes()
    times.begin()
    times.lap("outputs")
    total = sum(times._step.values())
    times.move(total / 2, "outputs", "detokenize")
    times.end(counted=True)
    assert sum(times.totals.values()) == total and times.totals["detokenize"] == total / 2
    times.handoff(0.001)  # the counted step's
    times.begin()
    times.end(counted=False)
    times.handoff(5.0)  # after a step that was not counted: not counted either
    assert times.steps == 1 and times.totals["handoff"] == 0.001


def test_a_fleets_step_times_sum_its_workers_and_weigh_their_averages():
    one, two = StepTimes(), StepTimes()
    for times, seconds, steps in ((one, 0.004, 1), (two, 0.010, 3)):
        for _ in range(steps):
            times.begin()
            times._step["forward"] = seconds  # a step of known length, as lap would record it
            times.end(counted=True)
    fleet = merged([one.snapshot(), two.snapshot(), StepTimes().snapshot(), None])
    assert fleet["steps"] == 4 and abs(fleet["totals_s"]["forward"] - 0.034) < 1e-12
    assert abs(fleet["recent_ms"]["forward"] - (4.0 * 1 + 10.0 * 3) / 4) < 1e-3
    assert merged([StepTimes().snapshot()]) is None
