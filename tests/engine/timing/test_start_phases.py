"""A load's phases in the start-up log line (engine/timing/start_phases.py): every part of a GGUF's
load is named with its seconds, after the time the process spent before it."""

from __future__ import annotations

import logging
import re

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.loader import load_model
from inference.engine.timing import start_phases
from inference.engine.timing.start_phases import StartPhases, process_age


def test_a_gguf_start_logs_each_part_of_its_load(caplog, monkeypatch):
    monkeypatch.setattr(start_phases, "_loads", 0)  # as the process's first load (other tests loaded before)
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        bundle = load_model(EngineConfig())  # the embedded GGUF
        names = [name for name, _ in bundle.start_phases.phases]
        assert names == ["GGUF header", "weights", "tokenizer (the wait for it)", "C++ step"]
        engine = LLMEngine(EngineConfig(), bundle=bundle)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up: ")]
    assert len(lines) == 1 and "KV pool and runner" in lines[0]
    since, before = map(
        float, re.match(r"start-up: ([0-9.]+) s since the process started: ([0-9.]+) s before", lines[0]).groups()
    )
    assert 0 < before <= since
    assert bundle.start_phases is None  # logged once: a restart's engine over the same weights says nothing
    caplog.clear()
    engine.fresh_copy()
    assert not [r for r in caplog.records if r.getMessage().startswith("start-up: ")]
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):  # a later load: a model switch, not the start
        LLMEngine(EngineConfig())
    (later,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up: ")]
    assert re.match(r"start-up: a load of [0-9.]+ s: GGUF header", later)


def test_laps_follow_each_other():
    phases = StartPhases()
    phases.lap("one")
    phases.lap("two")
    assert [name for name, _ in phases.phases] == ["one", "two"] and all(s >= 0 for _, s in phases.phases)
    assert phases.before_load <= process_age()
    assert phases.line().endswith(f"one {phases.phases[0][1]:.2f} s, two {phases.phases[1][1]:.2f} s")
