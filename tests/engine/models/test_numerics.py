"""Our model code against HF's reference: logits allclose in float32, identical greedy tokens.

Tolerance: max |logit difference| <= 1e-4 for the tiny random models and 2e-3 for the real
SmolLM2 (30 layers of float32 accumulation in a different operation order).
"""

from __future__ import annotations

import pytest
import torch

from inference.engine.sample.sampling_params import SamplingParams
from tests.conftest import (
    tiny_gemma3_hf,
    tiny_gpt2_hf,
    tiny_llama_hf,
    tiny_phi3_hf,
    tiny_qwen2_hf,
    tiny_qwen3_hf,
    tiny_smollm3_hf,
)
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, run_to_completion

TINY = {
    "gemma3": tiny_gemma3_hf,
    "llama": tiny_llama_hf,
    "phi3": tiny_phi3_hf,
    "gpt2": tiny_gpt2_hf,
    "qwen2": tiny_qwen2_hf,
    "qwen3": tiny_qwen3_hf,
    "smollm3": tiny_smollm3_hf,
}


def prompt_logits(engine, prompt_ids):
    """Logits our engine computes for the prompt's last position (through the paged cache)."""
    engine.add_request("probe", prompt_ids, SamplingParams(max_tokens=1, temperature=0.0, logprobs=0))
    batch = engine.scheduler.schedule()
    logits = engine.model_runner.run(batch).sampling
    engine.abort("probe")
    engine.step()
    return logits[0]


@pytest.mark.parametrize("arch", sorted(TINY))
def test_tiny_model_logits_match_hf(arch, smollm_tokenizer):
    hf = TINY[arch]()
    engine = engine_for(hf, smollm_tokenizer)
    prompt = torch.randint(3, 49152, (45,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        reference = hf(torch.tensor([prompt])).logits[0, -1]
    ours = prompt_logits(engine, prompt)
    assert torch.allclose(ours, reference, atol=1e-4, rtol=0), (ours - reference).abs().max()


@pytest.mark.parametrize("arch", sorted(TINY))
def test_tiny_model_greedy_matches_hf(arch, smollm_tokenizer):
    hf = TINY[arch]()
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=7)  # forces chunked prefill
    prompt = smollm_tokenizer("The quick brown fox jumps over the lazy dog because").input_ids
    engine.add_request("r", prompt, greedy(24))
    ours = generated_ids(run_to_completion(engine)["r"])
    assert ours == hf_greedy(hf, prompt, 24)


def test_real_smollm2_logits_match_hf(real_hf_model, real_bundle, smollm_tokenizer):
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine

    engine = LLMEngine(EngineConfig(dtype="float32", device="cpu", kv_cache_mb=32), bundle=real_bundle)
    prompt = smollm_tokenizer("The capital of France is Paris. The capital of Germany is").input_ids
    with torch.no_grad():
        reference = real_hf_model(torch.tensor([prompt])).logits[0, -1]
    ours = prompt_logits(engine, prompt)
    assert torch.allclose(ours, reference, atol=2e-3, rtol=0), (ours - reference).abs().max()


def test_real_smollm2_greedy_matches_hf(real_hf_model, real_bundle, smollm_tokenizer):
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine

    engine = LLMEngine(EngineConfig(dtype="float32", device="cpu", kv_cache_mb=32), bundle=real_bundle)
    prompt = smollm_tokenizer("The future of AI inference is").input_ids
    engine.add_request("r", prompt, greedy(32))
    assert generated_ids(run_to_completion(engine)["r"]) == hf_greedy(real_hf_model, prompt, 32)


def test_tiny_qwen3_gives_each_prompt_hfs_greedy_tokens_alone_and_in_a_batch(smollm_tokenizer):
    """Qwen3, written as one file over Llama's layers, batched with prompts of other lengths."""
    from inference.engine.models.qwen3 import Qwen3ForCausalLM

    hf = tiny_qwen3_hf()
    prompts = {"a": "The quick brown fox jumps over", "b": "one two", "c": "Once upon a time, in a land far away, there lived"}
    engine = engine_for(hf, smollm_tokenizer, block_size=4)
    assert (
        isinstance(engine.bundle.model, Qwen3ForCausalLM) and engine.bundle.cpu_step is not None
    )  # the fused step, Q/K norms included
    for key, text in prompts.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(16))
    batched = {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()}
    for key, text in prompts.items():
        ids = smollm_tokenizer(text).input_ids
        alone = engine_for(hf, smollm_tokenizer, block_size=4)
        alone.add_request(key, ids, greedy(16))
        assert generated_ids(run_to_completion(alone)[key]) == batched[key] == hf_greedy(hf, ids, 16), key
