"""The real Gemma 3 270M Q4_K_M file (llama.cpp's own conversion, fetched by `make test`) read in
place through our kernels: teacher-forced greedy tokens agree with transformers' Gemma3ForCausalLM
in float32 over the same de-quantized weights, on prompts longer than the 512-token window too.

The reference's weights come from our de-quantizer (held to gguf-py's bit for bit in
tests/engine/gguf/test_dequantize.py and on this file's blocks in tests/engine/kernels/), because
transformers' own GGUF loading parses the 262k-token vocabulary with gguf-py for ~20 s. Agreement
with llama-server on the same file is in tests/api/test_gemma3_live.py, where llama.cpp is built.
"""

from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.gguf.checkpoint import GGUFCheckpoint
from inference.engine.gguf.dequantize import dequantize
from tests.support import real_gguf
from tests.support.engine_helpers import prefill_logits

pytestmark = pytest.mark.real_model

HF_NAMES = {  # llama.cpp's tensor names -> transformers' (per layer: blk.N. -> model.layers.N.)
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TEXTS = [
    "The lighthouse keeper climbed the stairs every evening to light the lamp. One night, a storm",
    "def merge_sort(values):\n    if len(values) <= 1:\n        return values\n",
    "Photosynthesis is the process by which green plants use sunlight to",
    "The history of the Roman Empire spans more than a thousand years, from",
]


@pytest.fixture(scope="module")
def engine():
    return LLMEngine(EngineConfig(model=str(real_gguf.file_or_skip()), device="cpu", kv_cache_mb=64, max_num_seqs=2))


@pytest.fixture(scope="module")
def reference(engine):
    """transformers' Gemma 3 over the file's weights de-quantized to float32 (norms unshifted: the file
    holds 1 + w, as llama.cpp's converter writes it)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    checkpoint = GGUFCheckpoint.open(str(real_gguf.path()))
    state = {}
    for name, entry in checkpoint.tensors.items():
        values = dequantize(checkpoint.raw_tensor(name), entry.type, entry.shape, torch.float32)
        parts = name.split(".")
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        else:
            hf = f"model.layers.{parts[1]}.{HF_NAMES[parts[2]]}.weight"
        state[hf] = values - 1 if hf.endswith("norm.weight") else values
    model = Gemma3ForCausalLM(Gemma3TextConfig(**vars(checkpoint.hf_config))).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    return model


def test_the_file_runs_as_gemma3_in_its_own_blocks(engine):
    assert engine.architecture == "gemma3_text, sliding window 512 ×15/18"
    assert engine.weights.startswith("GGUF blocks: Q4_K ×27, Q5_0 ×81, Q6_K ×9, Q8_0 ×10")


def test_teacher_forced_greedy_tokens_agree_with_transformers(engine, reference):
    """Our activations go in as int8 blocks (llama.cpp's scheme): near-ties may flip, not 1 in 20."""
    agree = total = 0
    long_text = " ".join(TEXTS * 20)  # ~700 tokens: the window slides past the prompt's start
    for text, last in [*((t, 0) for t in TEXTS), (long_text, 200)]:
        ids = engine.tokenize(text)
        assert last == 0 or len(ids) > 512 + last
        with torch.no_grad():
            expected = reference(torch.tensor([ids]), logits_to_keep=last).logits[0].argmax(-1)
        ours = prefill_logits(engine, ids, last=last).argmax(-1)
        agree += int((ours == expected).sum())
        total += len(ours)
    assert total > 250 and agree / total >= 0.95, f"{agree} of {total} positions agree"
