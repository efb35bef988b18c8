"""transformers' own model class over a GGUF's weights, de-quantized to float32: the reference for
families whose files transformers cannot read itself (SmolLM3; Phi-3's partial rotary and LongRoPE
factors, which its GGUF reader leaves out) or reads slowly (Gemma 3's 262k-token vocabulary goes
through gguf-py for ~20 s).

The weights come from our de-quantizer (held to gguf-py's bit for bit in
tests/engine/gguf/test_dequantize.py); the names, the norm shift and the Q/K row order are undone
here, written from llama.cpp's converter, not from our loader's layout.
"""

from __future__ import annotations

import torch

from inference.engine.gguf.checkpoint import GGUFCheckpoint
from inference.engine.gguf.dequantize import dequantize

LAYER_NAMES = {  # llama.cpp's names in a block -> transformers' under model.layers.N.
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",  # a mixture of experts' router
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
FFN_NORM = {"gemma3_text": "pre_feedforward_layernorm"}  # elsewhere llama.cpp's ffn_norm is post_attention_layernorm
INTERLEAVED = ("llama", "mistral", "smollm3", "mixtral")  # whose Q/K rows llama.cpp's converter permuted


def reference_model(path: str):
    """transformers' float32 model of the file (eval mode). A LongRoPE file's reference uses the
    long factors at every length, as our engine does for a context longer than the original."""
    from transformers import AutoConfig, AutoModelForCausalLM

    checkpoint = GGUFCheckpoint.open(path)
    fields = dict(vars(checkpoint.hf_config))
    model_type = fields["model_type"]
    longrope = fields.pop("gguf_longrope", None)
    if longrope:
        long = checkpoint.float_tensor("rope_factors_long.weight").tolist()
        fields["rope_scaling"] = {"rope_type": "longrope", "short_factor": long, "long_factor": long, **longrope}
        fields.pop("rope_parameters", None)
    config = AutoConfig.for_model(model_type, **{k: v for k, v in fields.items() if k != "model_type"})
    state = {}
    for name, entry in checkpoint.tensors.items():
        if name.startswith("rope_factors") or name == "rope_freqs.weight":
            continue
        values = dequantize(checkpoint.raw_tensor(name), entry.type, entry.shape, torch.float32)
        if name.endswith("_exps.weight"):  # transformers keeps experts 3-D: gate and up as one, gate first
            layer, role = name.split(".")[1:3]
            hf = f"model.layers.{layer}.mlp.experts." + ("down_proj" if role == "ffn_down_exps" else "gate_up_proj")
            state[hf] = torch.cat([state[hf], values], dim=1) if role == "ffn_up_exps" else values
            continue
        state[_hf_name(name, model_type)] = _unpermuted(name, values, config) if model_type in INTERLEAVED else values
    if model_type == "gemma3_text":  # llama.cpp's converter wrote 1 + w
        state = {k: v - 1 if k.endswith("norm.weight") else v for k, v in state.items()}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    if "lm_head.weight" in missing:
        model.tie_weights()
    return model


def _hf_name(name: str, model_type: str) -> str:
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    if name in fixed:
        return fixed[name]
    if name == "output.weight":
        return "lm_head.weight"
    _, layer, role, kind = name.split(".")
    if model_type == "phi3" and role == "ffn_up":
        return f"model.layers.{layer}.mlp.gate_up_proj.{kind}"  # gate then up, fused as Phi-3 keeps them
    hf = FFN_NORM.get(model_type, "post_attention_layernorm") if role == "ffn_norm" else LAYER_NAMES[role]
    return f"model.layers.{layer}.{hf}.{kind}"


def _unpermuted(name: str, values: torch.Tensor, config) -> torch.Tensor:
    """llama.cpp's converter interleaved each Q/K head's two rotary halves; transformers keeps them apart."""
    role = name.split(".")[-2] if name.startswith("blk.") else ""
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}.get(role)
    if heads is None:
        return values
    rows = values.shape[0]
    return values.reshape(heads, rows // heads // 2, 2, *values.shape[1:]).transpose(1, 2).reshape(values.shape)
