"""The C++ layer halves (kernels/layers/llama_layer.cpp) compute exactly what the modules compute:
for Llama, Qwen2 (a QKV bias), Qwen3 (Q/K norms), Gemma 3 (norms after each sublayer, GELU-tanh,
sliding-window layers in their own pool with their own RoPE), Mistral (a window on every layer) and
the Qwen3.5 hybrid (a sigmoid-gated attention with partial RoPE; Gated DeltaNet layers in the one-call
decode: their wiring here; the DeltaNet kernel itself runs on both sides, and is judged against the torch
forms in tests/engine/kernels/test_gated_deltanet_kernels.py and against transformers in test_qwen3_5.py)."""

from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.layers.linear import bf16_weights_run_natively
from inference.engine.layers.linear import packed as packed_linear
from inference.engine.loader import build_bundle
from tests.conftest import tiny_gemma3_hf, tiny_llama_hf, tiny_mistral_hf, tiny_qwen2_hf, tiny_qwen3_hf
from tests.engine.models.test_qwen3_5 import tiny_qwen35_hf
from tests.support.engine_helpers import engine_for, greedy, run_to_completion


def run_mixed_steps(engine) -> dict:
    """Three prompts, long enough that chunked prefill shares steps with decodes; greedy with logprobs."""
    prompts = [torch.randint(3, 49152, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (5, 40, 70)]
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", engine.tokenize(prompt), greedy(12, logprobs=3))
    return {
        rid: [(lp.token_id, lp.logprob, lp.top) for out in outs for lp in out.logprobs]
        for rid, outs in run_to_completion(engine).items()
    }


PROJECTIONS = (
    ["int8", "int4", "onednn"]
    + (["mkl"] if torch.backends.mkl.is_available() else [])
    + (["bf16"] if bf16_weights_run_natively() else [])
)


FAMILIES = {
    "llama": tiny_llama_hf,
    "qwen2-bias": tiny_qwen2_hf,
    "qwen3": tiny_qwen3_hf,
    "gemma3": tiny_gemma3_hf,
    "qwen3.5-hybrid": tiny_qwen35_hf,  # gated attention, partial RoPE, DeltaNet layers
}


@pytest.mark.parametrize("make_model", list(FAMILIES.values()), ids=list(FAMILIES))
@pytest.mark.parametrize("projection", PROJECTIONS)
def test_compiled_paths_give_the_modules_bits(make_model, projection, smollm_tokenizer, monkeypatch):
    """Decode-only steps in one call, other steps in layer halves, against the modules throughout."""
    quantization = projection if projection in ("int8", "int4", "bf16") else "none"
    if quantization == "none":  # pack with this backend, whatever this CPU would choose
        monkeypatch.setattr(packed_linear, "packing_backend", lambda: projection)
    hf = make_model()
    engines = [engine_for(hf, smollm_tokenizer, quantization=quantization, max_num_batched_tokens=48) for _ in range(3)]
    whole = engines[0].bundle.model
    assert all(engine.model_runner.forward is engine.bundle.cpu_step is not None for engine in engines)
    hybrid = [w.is_deltanet for w in engines[0].bundle.cpu_step.layer_weights]
    assert hybrid == ([True, True, True, False] if make_model is tiny_qwen35_hf else [False] * len(hybrid))
    if projection in ("int8", "int4"):
        assert type(whole.layers[0].mlp.gate_up_proj).__name__ == {"int8": "Int8Linear", "int4": "GroupLinear"}[projection]
    else:
        assert whole.layers[0].mlp.gate_up_proj.backend == {"bf16": "onednn_bf16"}.get(projection, projection)
    kind = {"int4": "group", "bf16": "onednn_bf16"}.get(projection, projection)
    assert whole.layers[0].mlp.gate_up_proj.projection(engines[0].bundle.cpu_step.cpp).kind == kind
    engines[1].model_runner.forward.one_call_decode = False  # decodes through the layer halves too
    engines[2].model_runner.forward = engines[2].bundle.model  # the modules throughout
    reference = run_mixed_steps(engines[2])
    assert run_mixed_steps(engines[0]) == reference
    assert run_mixed_steps(engines[1]) == reference


@pytest.mark.parametrize("make_model", [tiny_gemma3_hf, tiny_mistral_hf], ids=["gemma3", "mistral"])
def test_windowed_layers_in_the_fused_step_read_only_their_window(make_model, smollm_tokenizer):
    """Prompts past the 8-token window, decodes in one call and in halves: the modules' bits, and
    a window that matters (the same weights without it say something else)."""
    hf = make_model()
    engines = [engine_for(hf, smollm_tokenizer, quantization="int4", max_num_batched_tokens=48) for _ in range(3)]
    assert all(engine.model_runner.forward is engine.bundle.cpu_step is not None for engine in engines)
    assert any(w.window == 8 for w in engines[0].bundle.cpu_step.layer_weights)
    engines[1].model_runner.forward.one_call_decode = False
    engines[2].model_runner.forward = engines[2].bundle.model
    reference = run_mixed_steps(engines[2])
    assert run_mixed_steps(engines[0]) == reference
    assert run_mixed_steps(engines[1]) == reference
    hf.config.sliding_window = 4096
    unwindowed = engine_for(hf, smollm_tokenizer, quantization="int4", max_num_batched_tokens=48)
    assert run_mixed_steps(unwindowed) != reference


def test_a_bf16_model_keeps_its_modules(tiny_hf, smollm_tokenizer):
    """bf16 linears stay nn.Linear (no oneDNN packing, no int8): nothing the C++ halves can call."""
    hf = tiny_hf
    config = EngineConfig(dtype="bfloat16", device="cpu")
    bundle = build_bundle(hf.config, smollm_tokenizer, hf.state_dict(), name="tiny", config=config)
    assert bundle.cpu_step is None
