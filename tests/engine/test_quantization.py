"""Weight-only int8: close to the float weights, and greedy tokens agree with bf16 on >= 95% of positions."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.loader import build_bundle
from inference.engine.quantization import Int8Linear, quantize_int8
from tests.engine.helpers import generated_ids, greedy, run_to_completion

PROMPTS = [
    "The future of AI inference is", "Once upon a time", "The best way to learn a language is",
    "def quicksort(arr):", "The history of Rome begins", "My favourite recipe for soup",
    "Explain gravity to a child:", "The stock market today", "A poem about autumn:",
    "The main causes of climate change are", "In the year 3000,", "How do vaccines work?",
    "The ocean is", "Dear hiring manager,", "Ten facts about cats:", "import numpy as np",
    "The meaning of life is", "Yesterday I went to the", "Photosynthesis is the process",
    "The rules of chess are",
]


def test_int8_linear_matches_float_within_quantization_error():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32, bias=True)
    x = torch.randn(5, 64)
    quantized = Int8Linear(linear)
    assert quantized.weight_int8.dtype == torch.int8
    error = (quantized(x) - linear(x)).abs().max()
    assert error < 0.02 * linear(x).abs().max()


def test_quantize_replaces_linears_except_the_kept_ones():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    model.qkv_proj = nn.Linear(8, 8)
    quantize_int8(model)
    assert [type(m).__name__ for m in (model[0], model[2][0], model.qkv_proj)] == ["Int8Linear", "Int8Linear", "Linear"]


def engine_with(real_hf_model, tokenizer, quantization: str) -> LLMEngine:
    cfg = EngineConfig(dtype="bfloat16", device="cpu", quantization=quantization, kv_cache_mb=64, max_num_seqs=20)
    bundle = build_bundle(real_hf_model.config, tokenizer, real_hf_model.state_dict(), name="smollm2", config=cfg)
    return LLMEngine(cfg, bundle=bundle)


def next_tokens(engine: LLMEngine, prompts: dict[str, list[int]]) -> dict[str, int]:
    for key, ids in prompts.items():
        engine.add_request(key, ids, greedy(1))
    return {key: generated_ids(outs)[0] for key, outs in run_to_completion(engine).items()}


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int8pack_mm"), reason="no int8 CPU kernel in this torch")
def test_int8_greedy_agrees_with_bf16_on_real_model(real_hf_model, smollm_tokenizer):
    """Per position, teacher-forced: given bf16's own greedy prefix, does int8 pick bf16's next token?

    Free-running agreement would count every token after a first near-tie flip as a miss
    (bf16 itself agrees with float32 on under 80% of positions that way), so it measures the
    model's sensitivity, not the quantization's error.
    """
    bf16 = engine_with(real_hf_model, smollm_tokenizer, "none")
    for i, prompt in enumerate(PROMPTS):
        bf16.add_request(str(i), prompt, greedy(16))
    continuations = {key: generated_ids(outs) for key, outs in run_to_completion(bf16).items()}
    prefixes = {}
    for key, continuation in continuations.items():
        prompt_ids = bf16.tokenize(PROMPTS[int(key)])
        for k in range(len(continuation)):
            prefixes[f"{key}/{k}"] = prompt_ids + continuation[:k]
    reference = next_tokens(bf16, prefixes)  # the same prefill path int8 takes below
    chosen = next_tokens(engine_with(real_hf_model, smollm_tokenizer, "int8"), prefixes)
    agree = sum(chosen[key] == token for key, token in reference.items())
    total = len(prefixes)
    assert total == 20 * 16
    assert agree / total >= 0.95, f"int8 agrees with bf16 on {agree}/{total} positions"
