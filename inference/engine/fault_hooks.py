"""Test-only: every place a test may make the engine fail on purpose. Nothing in the product sets one.

Tests set them directly (`engine.test_faults.step = ...`, `engine_thread.test_faults.loop = ...`);
against a live server they arrive through POST /_test/fault (serving/fault_injection.py, routed
only with MINIVLLM_FAULT_INJECTION=1) and `EngineClient.inject_fault`. Unset, each costs the loop
one attribute check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Hook = Callable[[], None]


@dataclass
class FaultHooks:
    step: Hook | None = None  # LLMEngine.step, before the forward pass: raising fails that step's requests
    loop: Hook | None = None  # EngineThread's loop, every pass: raising kills the loop (it restarts)
    restart: Hook | None = None  # EngineThread, once, before a restart builds its engine

    def fire(self, kind: str) -> None:
        hook = getattr(self, kind)
        if hook is not None:
            hook()

    def fire_once(self, kind: str) -> None:
        """Runs the hook and unsets it first (a restart's: the next restart runs without it)."""
        hook = getattr(self, kind)
        setattr(self, kind, None)
        if hook is not None:
            hook()
