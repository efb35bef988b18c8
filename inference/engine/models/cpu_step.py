"""Hands each Llama decoder layer to the C++ kernels (kernels/layers/llama_layer.cpp) where it can.

At one stream a decode step is ~200 small ops and Python's per-op cost exceeds most of them;
the C++ halves of a layer make it two calls around attention, and a step of decodes only
runs all layers in one call. They run the same kernels as the module path, so they apply
wherever every projection is one our C++ can call (each linear of layers/linear/ provides its own):
int8, 4- or 8-bit groups, bf16 weights or packed float32 (MKL or oneDNN), on CPU. Elsewhere (bf16, CUDA) the modules run.
"""

from __future__ import annotations

import torch
from torch import nn

from ..kernels import kernels
from ..layers.attention import decode_in_place
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


def compile_layers(model: nn.Module) -> bool:
    """Gives every decoder layer its C++ weights, or none of them; returns whether it did."""
    cpp = kernels()
    if cpp is None or not getattr(model, "FUSED_CPU_STEP", False) or model.cfg.hidden_size % 8:
        return False
    if model.norm.weight.device.type != "cpu" or model.norm.weight.dtype != torch.float32:
        return False
    weights = [_layer_weights(cpp, layer) for layer in model.layers]
    if any(w is None for w in weights):
        return False
    for layer, w in zip(model.layers, weights):
        layer.cpp_weights = w
    if decode_in_place(model.norm.weight.device, model.norm.weight.dtype, model.cfg.head_dim):
        model.cpp_decode_layers = weights  # the one-call step runs the decode attention kernels
    return True
