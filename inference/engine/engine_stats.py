"""EngineStats: the engine's snapshot, one declaration for everyone who reads or sums it.

LLMEngine fills it each step; EngineThread hands out the latest copy; a `runengine` worker sends
it as a plain dict in its heartbeat and the web side's fleet sums the fields marked `summed`
over its workers; /stats, /health and /metrics read its attributes. A number nobody measured
stays None (an engine still loading has no counts), never zero.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields


def _summed(default=None):
    """A count that adds up over a fleet of engines."""
    return field(default=default, metadata={"summed": True})


@dataclass(frozen=True)
class EngineStats:
    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    num_slots: int | None = _summed()
    running: int | None = _summed()
    waiting: int | None = _summed()
    slots: list[dict] = field(default_factory=list)  # per slot: request_id (None when free), tokens
    kv_blocks_used: int | None = _summed()
    kv_blocks_total: int | None = _summed()
    kv_cache_usage: float | None = None  # 0..1
    kv_pool_mb: float | None = None
    weights_mb: float | None = None
    prefix_cache_queries: int | None = _summed()
    prefix_cache_hits: int | None = _summed()
    prefix_cache_hit_rate: float | None = None
    num_preemptions: int | None = _summed()
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
    last_step_at: float | None = None  # the loop's last pass, on the reader's monotonic clock
    gpu_memory_used_mb: float | None = _summed()  # measured where the GPU is: remote workers only
    gpu_memory_total_mb: float | None = _summed()
    num_engines: int | None = None  # a fleet's: how many ready workers were summed
    engines: list[dict] | None = None  # a fleet's: one summary per worker it hears from

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
