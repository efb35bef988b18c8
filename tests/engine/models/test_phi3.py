"""Phi-3 / Phi-4-mini against transformers' Phi3ForCausalLM where it differs from Llama: LongRoPE's
short factors inside the original context and its long ones beyond it (chosen once, by the
served context, as llama.cpp does), partial rotary, and a sliding window over every layer.
(test_numerics.py holds plain Phi's logits and greedy tokens with the other families.)"""

from __future__ import annotations

import pytest
import torch

from inference.engine.models.phi3 import Phi3ForCausalLM
from tests.conftest import tiny_phi3_hf
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, prefill_logits, run_to_completion


def test_longrope_uses_the_short_factors_within_the_original_context(smollm_tokenizer):
    hf = tiny_phi3_hf(original=128)
    engine = engine_for(hf, smollm_tokenizer, max_model_len=128)
    assert not engine.bundle.model.cfg.use_long_factors and "short factors" in engine.architecture
    ids = torch.randint(3, 49152, (45,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)


def test_longrope_uses_the_long_factors_for_a_context_past_the_original(smollm_tokenizer):
    """transformers turns to the long factors once a sequence passes the original 128 tokens."""
    hf = tiny_phi3_hf(original=128)
    engine = engine_for(hf, smollm_tokenizer, max_model_len=512)
    assert engine.bundle.model.cfg.use_long_factors
    ids = torch.randint(3, 49152, (200,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0, -1]
    torch.testing.assert_close(prefill_logits(engine, ids)[-1], reference, atol=1e-4, rtol=0)


def test_partial_rotary_runs_the_fused_step(smollm_tokenizer):
    partial = engine_for(tiny_phi3_hf(), smollm_tokenizer)
    assert isinstance(partial.bundle.model, Phi3ForCausalLM) and partial.bundle.cpu_step is not None
    assert [w.rotary_dim for w in partial.bundle.cpu_step.layer_weights] == [12] * len(partial.bundle.model.layers)
    assert "RoPE on 12 of 16 dimensions" in partial.architecture


@pytest.mark.parametrize("rotary", [0.75, 1.0], ids=["partial-rotary", "whole-heads"])
def test_a_sliding_window_gives_hfs_greedy_tokens_batched_and_chunked(smollm_tokenizer, rotary):
    hf = tiny_phi3_hf(partial_rotary_factor=rotary)
    hf.config.sliding_window = 6
    for layer in hf.model.layers:
        layer.self_attn.sliding_window = 6
    prompts = ["The quick brown fox jumps over the lazy dog again and again", "one two three four five six seven"]
    expected = [hf_greedy(hf, smollm_tokenizer(p).input_ids, 16) for p in prompts]
    assert expected[0] != hf_greedy(tiny_phi3_hf(), smollm_tokenizer(prompts[0]).input_ids, 16)  # the window matters
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=7)
    assert engine.bundle.model.cfg.sliding_window == 6
    assert engine.bundle.cpu_step is not None  # the fused step, its window and partial rotary included
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), smollm_tokenizer(prompt).input_ids, greedy(16))
    results = run_to_completion(engine)
    assert [generated_ids(results[str(i)]) for i in range(len(prompts))] == expected


def test_whole_head_longrope_runs_the_fused_cpu_step_with_its_scaled_tables(smollm_tokenizer):
    """Phi-3-mini-128k's shape: RoPE on whole heads: Llama's layers, so the C++ step runs them, over
    LongRoPE's scaled and attention-factored tables."""
    hf = tiny_phi3_hf(original=128, partial_rotary_factor=1.0)
    engine = engine_for(hf, smollm_tokenizer, max_model_len=128)
    assert engine.bundle.cpu_step is not None
    ids = torch.randint(3, 49152, (45,), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)
