"""EngineStats: the engine's snapshot, one declaration for everyone who reads or sums it.

`EngineStats.of` fills it from an LLMEngine (engine_thread.py says when); EngineThread hands out the latest copy; a
`runengine` worker sends it as a plain dict in its heartbeat and the web side's fleet sums the
fields marked `summed` over its workers; /stats, /health and /metrics read its attributes. A number nobody measured
stays None (an engine still loading has no counts), never zero.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import LLMEngine

THROUGHPUT_WINDOW_S = 10.0


def _summed(default=None):
    """A count that adds up over a fleet of engines."""
    return field(default=default, metadata={"summed": True})


@dataclass(frozen=True)
class EngineStats:
    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    architecture: str | None = None  # "gemma3_text, sliding window 512 ×15/18"
    weights: str | None = None  # "GGUF blocks: Q4_K ×27, Q6_K ×9; KV float16"
    num_slots: int | None = _summed()
    running: int | None = _summed()
    waiting: int | None = _summed()
    slots: list[dict] = field(default_factory=list)  # per slot: request_id (None when free), tokens
    kv_blocks_used: int | None = _summed()
    kv_blocks_total: int | None = _summed()
    kv_cache_usage: float | None = None  # 0..1
    kv_pool_mb: float | None = None
    state_pool_mb: float | None = None  # of kv_pool_mb, a hybrid's recurrent-state rows (backed as first written)
    max_model_len: int | None = None  # the context served: the model's, or what the planned pool holds (kv_cache/memory_plan.py)
    weights_mb: float | None = None
    prefix_cache_queries: int | None = _summed()
    prefix_cache_hits: int | None = _summed()
    prefix_cache_hit_rate: float | None = None
    num_preemptions: int | None = _summed()
    num_requests_resumed: int | None = _summed()  # carried on after their engine died (engine/resume.py)
    tokens_per_second: float | None = _summed()
    total_tokens_generated: int | None = _summed()
    total_prompt_tokens: int | None = _summed()
    uptime_seconds: float | None = None
    steps: int | None = _summed()
    grammar_mask_seconds: float | None = _summed()  # time spent computing constrained rows' token masks
    grammar_mask_rows: int | None = _summed()  # constrained rows those masks were computed for
    grammar_mask_wait_seconds: float | None = _summed()  # time the loop waited for masks after the forward
    speculative: str | None = None  # speculative decoding's mode: auto | ngram | off
    spec_draft_tokens: int | None = _summed()  # tokens guessed (spec_decode/proposer.py)
    spec_accepted_tokens: int | None = _summed()  # of those, accepted by verification
    spec_verifications: int | None = _summed()  # sequence-steps that verified guesses
    spec_verified_tokens: int | None = _summed()  # tokens those steps wrote (accepted guesses + one sampled each)
    step_times: dict | None = None  # where decode steps' time goes (engine/timing/step_times.py): recent ms, overhead, totals
    last_step_at: float | None = None  # the loop's last pass, on the reader's monotonic clock
    gpu_memory_used_mb: float | None = _summed()  # measured where the GPU is: remote workers only
    gpu_memory_total_mb: float | None = _summed()
    num_engines: int | None = None  # a fleet's: how many ready workers were summed
    engines: list[dict] | None = None  # a fleet's: one summary per worker it hears from

    @classmethod
    def of(cls, engine: LLMEngine) -> EngineStats:
        """The engine's snapshot now."""
        blocks, scheduler, speculator = engine.kv_cache, engine.scheduler, engine.speculator
        slots = [
            {"request_id": seq.request_id, "choice": seq.index, "tokens": seq.num_output_tokens}
            if seq
            else {"request_id": None, "choice": None, "tokens": 0}
            for seq in scheduler.slots
        ]
        generated = engine.output_processor.generated
        return cls(
            model=engine.model_name,
            device=engine.device,
            dtype=engine.dtype,
            architecture=engine.architecture,
            weights=engine.weights,
            num_slots=engine.num_slots,
            running=len(scheduler.running),
            waiting=len(scheduler.waiting),
            slots=slots,
            kv_blocks_used=blocks.num_used_blocks,
            kv_blocks_total=blocks.num_blocks,
            kv_pool_mb=engine.model_runner.kv_pool_bytes / 2**20,
            state_pool_mb=engine.model_runner.state_pool_bytes / 2**20,
            max_model_len=engine.max_model_len,
            weights_mb=engine.weights_mb,
            kv_cache_usage=blocks.num_used_blocks / blocks.num_blocks,
            prefix_cache_queries=blocks.prefix_queries,
            prefix_cache_hits=blocks.prefix_hits,
            prefix_cache_hit_rate=blocks.prefix_hits / blocks.prefix_queries if blocks.prefix_queries else 0.0,
            num_preemptions=scheduler.num_preemptions,
            num_requests_resumed=0,  # the engine thread counts its restarts' resumes (engine_thread.py)
            tokens_per_second=generated.per_second(),
            total_tokens_generated=generated.total,
            total_prompt_tokens=engine.total_prompt_tokens,
            uptime_seconds=time.monotonic() - engine.started_at,
            steps=engine.num_steps,
            grammar_mask_seconds=engine.grammar_mask_seconds,
            grammar_mask_rows=engine.grammar_mask_rows,
            grammar_mask_wait_seconds=engine.grammar_mask_wait_seconds,
            speculative=speculator.mode if speculator.enabled else "off",
            spec_draft_tokens=speculator.num_draft_tokens,
            spec_accepted_tokens=speculator.num_accepted_tokens,
            spec_verifications=speculator.verification_steps,
            spec_verified_tokens=speculator.verified_tokens,
            step_times=engine.step_times.snapshot(),
        )

    @classmethod
    def summed_fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.metadata.get("summed"))

    @classmethod
    def from_dict(cls, data: dict) -> EngineStats:
        """From a heartbeat: fields this version does not know are ignored (a newer worker)."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> EngineStats:
        return dataclasses.replace(self, **changes)


class TokenRate:
    """Tokens written: the total since the engine started, and the rate over the last
    THROUGHPUT_WINDOW_S seconds (EngineStats.tokens_per_second). The window's sum is kept as
    tokens come and go: the snapshot reads it every step, and a sum over a busy window's
    thousands of entries cost more than the rest of the snapshot."""

    def __init__(self):
        self.total = 0
        self._recent: deque[tuple[float, int]] = deque()
        self._in_window = 0

    def add(self, now: float, count: int) -> None:
        self._recent.append((now, count))
        self._in_window += count
        self.total += count

    def per_second(self) -> float:
        now = time.monotonic()
        while self._recent and now - self._recent[0][0] > THROUGHPUT_WINDOW_S:
            self._in_window -= self._recent.popleft()[1]
        if not self._recent:
            return 0.0
        span = max(now - self._recent[0][0], 1.0)
        return self._in_window / span
