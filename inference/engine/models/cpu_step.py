"""The fused C++ step for Llama-family models on CPU (kernels/layers/llama_layer.cpp): Llama,
Mistral, Qwen2, Qwen3 and Phi-3, Gemma 3 (Q/K norms, norms after each sublayer, GELU-tanh,
sliding windows with their own RoPE) and the Qwen3.5 hybrid (gated attention with partial RoPE;
its Gated DeltaNet layers in the one-call decode, their modules in steps with prefill chunks).

At one stream a decode step is ~200 small ops and Python's per-op cost exceeds most of them;
the C++ halves of a layer make it two calls around attention, and a step of decodes only runs
every layer in one call. They run the same kernels as the modules, in the same order, so the
bits are the modules' bits (a test). The loader installs a `FusedCpuStep` where every projection
is one our C++ can call (each linear format of layers/linear/ provides its own: int8, 4- or
8-bit groups, bf16 weights or packed float32 for MKL or oneDNN), on CPU in float32; the model
runner then calls it in place of the model's own forward. Elsewhere (bf16 activations, CUDA,
experts, a norm our C++ does not run) the modules run.
"""

from __future__ import annotations

import torch
from torch import nn

from ..layers.activation import gelu_tanh
from ..layers.attention import AttentionMetadata, attend
from ..layers.attention.decode_kernels import KernelDecode
from ..layers.cpu_kernels import cpu_kernels_for


def _projection(cpp, linear: nn.Module | None):
    """The C++ projection the linear's format provides (layers/linear/), or None for plain torch modules."""
    projection = getattr(linear, "projection", None)
    return projection(cpp) if projection is not None else None


def _norms(layer: nn.Module) -> tuple:
    """(before attention, after attention, before the MLP, after the MLP): Gemma normalises each
    sublayer's output too (its `post_attention_layernorm` is the attention output's); the Llama
    family only the inputs (its `post_attention_layernorm` is the MLP's input norm). None: no such norm."""
    if hasattr(layer, "pre_feedforward_layernorm"):
        return (
            layer.input_layernorm,
            layer.post_attention_layernorm,
            layer.pre_feedforward_layernorm,
            layer.post_feedforward_layernorm,
        )
    return layer.input_layernorm, None, layer.post_attention_layernorm, None


def _deltanet_weights(cpp, layer: nn.Module):
    """A hybrid's Gated DeltaNet layer (Qwen3.5's): its mixer's projections stand where attention's are."""
    mixer, mlp = layer.linear_attn, layer.mlp
    projections = [_projection(cpp, m) for m in (mixer.in_proj, mixer.out_proj, *_mlp_linears(mlp))]
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    if mixer._cpp is None or any(p is None for p in projections) or any(n._cpp is None or n.eps != norms[0].eps for n in norms):
        return None
    in_proj, out_proj, gate_up, down = projections

    def floats(t):
        return t.detach().float().contiguous()

    return cpp.LlamaLayerWeights(
        input_norm=norms[0].weight.detach(),
        post_attention_norm=norms[1].weight.detach(),
        eps=norms[0].eps,
        qkv=in_proj,
        o=out_proj,
        gate_up=gate_up,
        down=down,
        heads=mixer.num_v_heads,
        kv_heads=0,
        head_dim=mixer.head_v_dim,
        intermediate=mlp.intermediate,
        deltanet=cpp.DeltaNetMixer(
            conv_weight=floats(mixer.conv_weight),
            dt_bias=floats(mixer.dt_bias),
            decay_rate=floats(mixer.decay_rate),
            norm_weight=floats(mixer.norm.weight),
            norm_eps=mixer.norm.eps,
            key_heads=mixer.num_k_heads,
            conv_channels=mixer.conv_dim,
            tiled_heads=mixer.tiled_heads,
        ),
    )


def _mlp_linears(mlp: nn.Module) -> tuple:
    """(gate_up, down), or Nones where the MLP is not one fused gate/up and a down (experts)."""
    return getattr(mlp, "gate_up_proj", None), getattr(mlp, "down_proj", None)


def _layer_weights(cpp, layer: nn.Module):
    if getattr(layer, "linear", False):
        return _deltanet_weights(cpp, layer)
    attn, mlp = layer.self_attn, layer.mlp
    is_gelu_tanh = gelu_tanh(getattr(mlp, "activation", None))
    if is_gelu_tanh is None:
        return None  # an activation the C++ does not compute
    projections = [_projection(cpp, m) for m in (attn.qkv_proj, attn.o_proj, *_mlp_linears(mlp))]
    if any(p is None for p in projections):
        return None
    if not attn.use_rope or attn.rotary_dim % 2:
        return None  # the C++ rotates every head, in halves (SmolLM3's NoPE layers: the modules)
    qk_norms = (attn.q_norm, attn.k_norm) if hasattr(attn, "q_norm") else ()
    if any(norm.weight.numel() != attn.head_dim for norm in qk_norms):
        return None  # a norm over all heads at once (OLMoE's), not each head's
    before_attention, after_attention, before_mlp, after_mlp = _norms(layer)
    norms = [n for n in (before_attention, after_attention, before_mlp, after_mlp, *qk_norms) if n is not None]
    if any(n._cpp is None or n.eps != before_attention.eps for n in norms):
        return None  # a norm the modules run through torch (a head too narrow for the kernel), or another eps

    def weight(norm):
        return None if norm is None else norm.weight.detach()

    qkv, o, gate_up, down = projections
    return cpp.LlamaLayerWeights(
        input_norm=weight(before_attention),
        post_attention_norm=weight(before_mlp),
        eps=before_attention.eps,
        qkv=qkv,
        o=o,
        gate_up=gate_up,
        down=down,
        heads=attn.num_heads,
        kv_heads=attn.num_kv_heads,
        head_dim=attn.head_dim,
        intermediate=mlp.intermediate,
        q_norm=weight(qk_norms[0]) if qk_norms else None,
        k_norm=weight(qk_norms[1]) if qk_norms else None,
        attention_output_norm=weight(after_attention),
        mlp_output_norm=weight(after_mlp),
        gelu_tanh=is_gelu_tanh,
        window=attn.window or 0,
        local_rope=getattr(layer, "sliding", False),  # Gemma 3's local layers turn by their own RoPE base
        rotary_dim=attn.rotary_dim,
        output_gate=getattr(attn, "output_gate", False),
    )


class FusedCpuStep:
    """The model's forward in C++ per layer: `step(input_ids, positions, kv_caches, meta)` -> hidden states."""

    def __init__(self, cpp, model: nn.Module, layer_weights: list):
        self.cpp = cpp
        self.model = model
        self.layer_weights = layer_weights
        self.any_local_rope = any(w.local_rope for w in layer_weights)
        attention = [layer.self_attn for layer in model.layers if hasattr(layer, "self_attn")]
        self.scale = attention[0].scale if attention else 1.0
        self.one_call_decode = True  # tests turn it off to run decodes through the layer halves too

    def __call__(self, input_ids, positions, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        model, cpp = self.model, self.cpp
        x = model.embed(input_ids)
        rope = model.rotary.tables(positions, x.dtype)
        local = model.local_rotary.tables(positions, x.dtype) if self.any_local_rope else None
        pooled = meta.window  # the sliding-window layers' own pool, where the runner keeps one
        state = meta.state  # a hybrid's recurrent layers: each row's state slot
        verifying = state is not None and bool(state.verifies)  # their rows step through the modules (GatedDeltaNet._steps)
        if self.one_call_decode and not verifying and not meta.prefills and self._kernel_decode(meta):  # every layer in one call
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
                local_cos=local.cos if local else None,
                local_sin=local.sin if local else None,
                window_write_rows=pooled.write_rows if pooled else None,
                window_block_tables=pooled.decode.tables if pooled else None,
                window_lengths=pooled.decode.lengths if pooled else None,
                state_slots=state.decode_slots if state is not None else None,
            )
            return model.norm(x)
        for layer, weights, cache in zip(model.layers, self.layer_weights, kv_caches):  # two calls around attention
            if weights.is_deltanet:  # steps not made in one call: the module (its decode rows in C++ too)
                x = layer(x, rope, cache, meta)
                continue
            k_cache, v_cache = cache
            tables = local if weights.local_rope else rope
            window = weights.window or None
            layer_meta = pooled if window and pooled is not None else meta  # as paged_attention picks it
            q, k, v, *gate = cpp.llama_attention_inputs(
                weights, x, tables.cos, tables.sin, k_cache, v_cache, layer_meta.write_rows
            )
            attended = attend(q, k, v, k_cache, v_cache, layer_meta, self.scale, window)
            x = cpp.llama_attention_output_and_mlp(weights, x, attended, gate[0] if gate else None)
        return model.norm(x)

    @staticmethod
    def _kernel_decode(meta: AttentionMetadata) -> bool:
        """Whether the step's decodes (and the window pool's, where there is one) read through our kernels."""
        return isinstance(meta.decode, KernelDecode) and (meta.window is None or isinstance(meta.window.decode, KernelDecode))


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
