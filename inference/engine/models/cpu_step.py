"""The fused C++ step for Llama-family models on CPU (kernels/layers/llama_layer.cpp).

At one stream a decode step is ~200 small ops and Python's per-op cost exceeds most of them;
the C++ halves of a layer make it two calls around attention, and a step of decodes only runs
every layer in one call. They run the same kernels as the modules, in the same order, so the
bits are the modules' bits (a test). The loader installs a `FusedCpuStep` where every projection
is one our C++ can call (each linear format of layers/linear/ provides its own: int8, 4- or
8-bit groups, bf16 weights or packed float32 for MKL or oneDNN), on CPU in float32; the model
runner then calls it in place of the model's own forward. Elsewhere (bf16 activations, CUDA,
Qwen3's extra norms) the modules run.
"""

from __future__ import annotations

import torch
from torch import nn

from ..layers.attention import AttentionMetadata, attend
from ..layers.attention.decode_kernels import KernelDecode
from ..layers.cpu_kernels import cpu_kernels_for
from .llama import LlamaDecoderLayer


def _projection(cpp, linear: nn.Module):
    """The C++ projection the linear's format provides (layers/linear/), or None for plain torch modules."""
    projection = getattr(linear, "projection", None)
    return projection(cpp) if projection is not None else None


def _layer_weights(cpp, layer: LlamaDecoderLayer):
    attn, mlp = layer.self_attn, layer.mlp
    projections = [_projection(cpp, m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)]
    if any(p is None for p in projections):
        return None
    qkv, o, gate_up, down = projections
    return cpp.LlamaLayerWeights(
        input_norm=layer.input_layernorm.weight.detach(),
        post_attention_norm=layer.post_attention_layernorm.weight.detach(),
        eps=layer.input_layernorm.eps,
        qkv=qkv,
        o=o,
        gate_up=gate_up,
        down=down,
        heads=attn.num_heads,
        kv_heads=attn.num_kv_heads,
        head_dim=attn.head_dim,
        intermediate=mlp.intermediate,
    )


class FusedCpuStep:
    """The model's forward in C++ per layer: `step(input_ids, positions, kv_caches, meta)` -> hidden states."""

    def __init__(self, cpp, model: nn.Module, layer_weights: list):
        self.cpp = cpp
        self.model = model
        self.layer_weights = layer_weights
        self.scale = model.layers[0].self_attn.scale
        self.one_call_decode = True  # tests turn it off to run decodes through the layer halves too

    def __call__(self, input_ids, positions, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        model, cpp = self.model, self.cpp
        x = model.embed_tokens(input_ids)
        rope = model.rotary.tables(positions, x.dtype)
        if self.one_call_decode and not meta.prefills and isinstance(meta.decode, KernelDecode):  # every layer in one call
            x = cpp.llama_decode_layers(
                self.layer_weights,
                x,
                rope.cos,
                rope.sin,
                [k for k, _ in kv_caches],
                [v for _, v in kv_caches],
                meta.write_rows,
                meta.decode.tables,
                meta.decode.lengths,
                self.scale,
            )
            return model.norm(x)
        for weights, (k_cache, v_cache) in zip(self.layer_weights, kv_caches):  # two calls around attention
            q, k, v = cpp.llama_attention_inputs(weights, x, rope.cos, rope.sin, k_cache, v_cache, meta.write_rows)
            attended = attend(q, k, v, k_cache, v_cache, meta, self.scale)
            x = cpp.llama_attention_output_and_mlp(weights, x, attended)
        return model.norm(x)


def install_cpu_step(model: nn.Module) -> FusedCpuStep | None:
    """The fused step for this model, or None where its layers are not exactly what the C++ computes."""
    if not getattr(model, "FUSED_CPU_STEP", False):
        return None
    weight = model.norm.weight
    cpp = cpu_kernels_for(weight.device, weight.dtype, model.cfg.hidden_size)
    if cpp is None:
        return None
    weights = [_layer_weights(cpp, layer) for layer in model.layers]
    if any(w is None for w in weights):
        return None
    return FusedCpuStep(cpp, model, weights)
