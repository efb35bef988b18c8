"""Shared helpers for engine tests: run requests to completion, and HF's greedy reference."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.kernels import kernels
from inference.engine.layers.linear.groups import GROUP
from inference.engine.loader import build_bundle
from inference.engine.sample.sampling_params import SamplingParams


def dequantize_groups(levels: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor) -> torch.Tensor:
    """The float32 weight that groups (layers/linear/groups.py) stand for: scale * level + minimum,
    rounded once (as gguf's numpy): the reference the group layers and kernels are checked against."""
    rows, columns = levels.shape
    groups = levels.float().reshape(rows, columns // GROUP, GROUP)
    return (groups * scales.float()[..., None] + minimums.float()[..., None]).reshape(rows, columns)


@dataclass
class StepTrace:
    """What one step ran, by request id: the batch its scheduler made (`trace_steps`)."""

    decodes: list[str] = field(default_factory=list)  # every sequence that decoded, guesses or not
    prefills: list[tuple[str, int]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    verifies: list[tuple[str, int]] = field(default_factory=list)  # (request id, guesses verified)

    @classmethod
    def of(cls, batch) -> StepTrace:
        return cls(
            decodes=[s.request_id for s in batch.decodes + batch.verifies],
            prefills=[(s.request_id, n) for s, n in batch.prefills],
            preempted=[s.request_id for s in batch.preempted],
            verifies=[(s.request_id, len(s.draft)) for s in batch.verifies],
        )

    @property
    def request_ids(self) -> set[str]:
        return set(self.decodes) | {r for r, _ in self.prefills}


class StepTracer:
    """The batches an engine's steps schedule, as StepTraces: `last` is the latest step's."""

    def __init__(self, engine: LLMEngine):
        self.last = StepTrace()
        schedule = engine.scheduler.schedule

        def traced():
            batch = schedule()
            self.last = StepTrace.of(batch)  # now: a verification's guesses are gone once it is written
            return batch

        engine.scheduler.schedule = traced


def trace_steps(engine: LLMEngine) -> StepTracer:
    """Records what each of the engine's steps runs from now on (its scheduler's batches)."""
    return StepTracer(engine)


def engine_for(hf_model, tokenizer, **config) -> LLMEngine:
    cfg = EngineConfig(dtype="float32", device="cpu", **config)
    bundle = build_bundle(hf_model.config, tokenizer, hf_model.state_dict(), name="test-model", config=cfg)
    return LLMEngine(cfg, bundle=bundle)


def run_to_completion(engine: LLMEngine, max_steps: int = 10_000) -> dict[str, list]:
    """Steps until idle; returns each request's outputs in order."""
    results: dict[str, list] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return results
        for out in engine.step():
            results.setdefault(out.request_id, []).append(out)
    raise AssertionError("engine did not go idle")


def generated_ids(outputs) -> list[int]:
    return [t for out in outputs for t in out.token_ids]


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)


@torch.no_grad()
def hf_greedy(hf_model, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """HF's reference greedy continuation: argmax over a full forward per token (no cache, no generate())."""
    ids = list(prompt_ids)
    for _ in range(max_tokens):
        ids.append(int(hf_model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt_ids) :]


def prefill_logits(engine: LLMEngine, token_ids: list[int] | torch.Tensor, fused: bool = True, last: int = 0) -> torch.Tensor:
    """Logits at every position of one prefill (its `last` positions only, where given) through the
    engine's own model (its fused C++ step where it has one, unless `fused` is False) and cache:
    what teacher-forced comparisons read."""
    from inference.engine.layers.attention import AttentionMetadata, PrefillChunk

    ids = torch.as_tensor(token_ids)
    n = len(ids)
    meta = AttentionMetadata(
        write_rows=engine.model_runner.head_slot_offsets.add(torch.arange(n)).reshape(-1),
        num_decodes=0,
        decode=None,
        prefills=[PrefillChunk(start=0, end=n, context_len=n, block_rows=None, causal_mask=None)],
    )
    window = engine.model_runner.window
    if window is not None:  # its sliding-window layers write their own pool (read back by nothing here)
        slots = torch.arange(n) % ((window.pool_blocks - 1) * window.block_size)
        meta.window = AttentionMetadata(window.head_slot_offsets.add(slots).reshape(-1), 0, None, meta.prefills)
    if engine.model_runner.recurrent:  # a hybrid's recurrent layers: state slot 0, from zeros
        from inference.engine.layers.gated_deltanet import StateMetadata

        meta.state = StateMetadata(None, [0], [True])
    model = engine.bundle.model
    for rotary in engine.model_runner.rotaries:  # the rows this prefill reaches, as the runner's steps ensure them
        rotary.ensure(n)
    with torch.inference_mode():
        step = (engine.bundle.cpu_step if fused else None) or model
        return model.compute_logits(step(ids, torch.arange(n), engine.model_runner.kv_caches, meta)[-last:])


@contextmanager
def without_cpu_kernels():
    """MINIVLLM_CPU_KERNELS=0 for what is built inside: no C++ kernel bound, the torch forms (CUDA's path)."""
    before = os.environ.get("MINIVLLM_CPU_KERNELS")
    os.environ["MINIVLLM_CPU_KERNELS"] = "0"
    kernels.cache_clear()  # kernels() answers once per process: ask it again under the switch
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MINIVLLM_CPU_KERNELS")
        else:
            os.environ["MINIVLLM_CPU_KERNELS"] = before
        kernels.cache_clear()
