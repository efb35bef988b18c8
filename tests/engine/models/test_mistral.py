"""Mistral v0.1's sliding window over every layer, against transformers' MistralForCausalLM: a
window shorter than the prompts, the context no longer capped at the window."""

from __future__ import annotations

import torch

from tests.conftest import tiny_mistral_hf
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, prefill_logits, run_to_completion


def test_a_window_shorter_than_the_prompts_gives_hfs_greedy_tokens_batched_and_chunked(smollm_tokenizer):
    hf = tiny_mistral_hf(6)
    prompts = ["The quick brown fox jumps over the lazy dog again and again", "one two three four five six seven"]
    expected = [hf_greedy(hf, smollm_tokenizer(p).input_ids, 16) for p in prompts]
    assert expected[0] != hf_greedy(tiny_mistral_hf(None), smollm_tokenizer(prompts[0]).input_ids, 16)  # the window matters
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=7)
    assert engine.architecture == "mistral, sliding window 6" and engine.bundle.cpu_step is not None  # windows in the fused step
    assert engine.max_model_len == 512  # the context is the model's, not the window's
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), smollm_tokenizer(prompt).input_ids, greedy(16))
    results = run_to_completion(engine)
    assert [generated_ids(results[str(i)]) for i in range(len(prompts))] == expected


def test_without_a_window_mistral_runs_the_fused_step_with_hfs_logits(smollm_tokenizer):
    hf = tiny_mistral_hf(None)
    engine = engine_for(hf, smollm_tokenizer)
    assert engine.architecture == "mistral, full attention" and engine.bundle.cpu_step is not None
    ids = torch.randint(3, 49152, (45,), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)
