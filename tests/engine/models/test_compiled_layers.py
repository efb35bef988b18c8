"""The C++ layer halves (kernels/llama_layer.cpp) compute exactly what the modules compute."""
from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.loader import build_bundle
from tests.conftest import tiny_llama_hf, tiny_qwen2_hf
from tests.engine.helpers import engine_for, greedy, run_to_completion


def run_mixed_steps(engine) -> dict:
    """Three prompts, long enough that chunked prefill shares steps with decodes; greedy with logprobs."""
    prompts = [torch.randint(3, 49152, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (5, 40, 70)]
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, greedy(12, logprobs=3))
    return {
        rid: [(lp.token_id, lp.logprob, lp.top) for out in outs for lp in out.logprobs]
        for rid, outs in run_to_completion(engine).items()
    }


@pytest.mark.parametrize("make_model", [tiny_llama_hf, tiny_qwen2_hf], ids=["llama", "qwen2-bias"])
@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_compiled_halves_give_the_modules_bits(make_model, quantization, smollm_tokenizer):
    hf = make_model()
    compiled = engine_for(hf, smollm_tokenizer, quantization=quantization, max_num_batched_tokens=48)
    modules = engine_for(hf, smollm_tokenizer, quantization=quantization, max_num_batched_tokens=48)
    assert all(layer.compiled_weights is not None for layer in compiled.bundle.model.layers)
    for layer in modules.bundle.model.layers:
        layer.compiled_weights = None
    assert run_mixed_steps(compiled) == run_mixed_steps(modules)


def test_a_bf16_model_keeps_its_modules(smollm_tokenizer):
    """bf16 linears stay nn.Linear (no oneDNN packing, no int8): nothing the C++ halves can call."""
    hf = tiny_llama_hf()
    config = EngineConfig(dtype="bfloat16", device="cpu")
    bundle = build_bundle(hf.config, smollm_tokenizer, hf.state_dict(), name="tiny", config=config)
    assert all(layer.compiled_weights is None for layer in bundle.model.layers)
