"""Shared helpers for engine tests: run requests to completion, and HF's greedy reference."""

from __future__ import annotations

import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.loader import build_bundle
from inference.engine.sample.sampling_params import SamplingParams


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


def prefill_logits(engine: LLMEngine, token_ids: list[int] | torch.Tensor, fused: bool = True) -> torch.Tensor:
    """Logits at every position of one prefill through the engine's own model (its fused C++ step
    where it has one, unless `fused` is False) and cache: what teacher-forced comparisons read."""
    from inference.engine.layers.attention import AttentionMetadata, PrefillChunk

    ids = torch.as_tensor(token_ids)
    n = len(ids)
    meta = AttentionMetadata(
        write_rows=engine.model_runner.head_slot_offsets.add(torch.arange(n)).reshape(-1),
        num_decodes=0,
        decode=None,
        prefills=[PrefillChunk(start=0, end=n, context_len=n, block_rows=None, causal_mask=None)],
    )
    model = engine.bundle.model
    with torch.inference_mode():
        step = (engine.bundle.cpu_step if fused else None) or model
        return model.compute_logits(step(ids, torch.arange(n), engine.model_runner.kv_caches, meta))
