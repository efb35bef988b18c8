"""Gemma 3 (text): the Llama layout with Gemma's differences, over the shared layers.

What differs from Llama: five of every six layers attend through a sliding window (the
`sliding_attention` layers of the config's `layer_types`) and rotate with their own RoPE base;
Q and K are RMS-normalised per head before RoPE (as Qwen3); each layer has four norms (before and
after attention, before and after the feed-forward); the feed-forward is GELU-tanh gated; the
embeddings are scaled by √hidden; queries by `query_pre_attn_scalar`^-0.5; the output is the
embedding (tied).

Gemma's norms multiply by `1 + weight`. We keep `1 + weight` as the norm's weight, so our RMSNorm
(and its C++ kernel) runs them unchanged: HF checkpoints are shifted as they load, and llama.cpp's
converter already wrote GGUF norms shifted (transformers' GGUF reader subtracts the 1 again). As
transformers computes them in float32 whatever the model's dtype, `1 + weight` stays float32
(GemmaRMSNorm): in bfloat16 it would round to steps of 1/128 near 1.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.attention import AttentionMetadata
from ..layers.norm import RMSNorm
from ..layers.rotary import RopeTables, RotaryEmbedding
from .llama import LlamaArgs, LlamaForCausalLM, LlamaMLP
from .qwen3 import Qwen3Attention

GLOBAL_ROPE_DEFAULT = {"rope_type": "default", "rope_theta": 1_000_000.0}
LOCAL_ROPE_DEFAULT = {"rope_type": "default", "rope_theta": 10_000.0}


class GemmaRMSNorm(RMSNorm):
    """RMSNorm in float32 over a float32 `1 + weight`, the result in the activations' dtype (what
    transformers' Gemma3RMSNorm computes); `.to(dtype)` leaves the weight float32."""

    keep_float32 = True  # gguf/dense.py reads these weights as float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._cpp is not None or x.dtype == torch.float32:
            return super().forward(x)
        return F.rms_norm(x.float(), self.weight.shape, self.weight.float(), self.eps).to(x.dtype)

    def _apply(self, fn, recurse=True):
        weight = self.weight.data
        super()._apply(fn, recurse)
        self.weight.data = weight.to(self.weight.device)  # moved where fn moved it, still float32
        return self


class Gemma3Args(LlamaArgs):
    """Llama's fields plus the window, the layer types, each type's RoPE and the query scale."""

    def __init__(self, hf_config, max_positions: int):
        super().__init__(hf_config, max_positions)
        self.qkv_bias = self.o_bias = bool(getattr(hf_config, "attention_bias", False))
        self.interleaved_rope_in_gguf = False  # llama.cpp writes Gemma's Q/K rows in HF's order
        self.sliding_window = hf_config.sliding_window
        self.layer_types = list(hf_config.layer_types)
        params = getattr(hf_config, "rope_parameters", None) or {}
        self.global_rope = {**GLOBAL_ROPE_DEFAULT, **(params.get("full_attention") or {})}
        self.local_rope = {**LOCAL_ROPE_DEFAULT, **(params.get("sliding_attention") or {})}
        self.query_scale = float(getattr(hf_config, "query_pre_attn_scalar", None) or self.head_dim) ** -0.5
        self.embed_scale = math.sqrt(self.hidden_size)
        if getattr(hf_config, "final_logit_softcapping", None) or getattr(hf_config, "attn_logit_softcapping", None):
            raise ValueError("logit soft-capping (Gemma 2) is not supported by our Gemma 3 code")
        if getattr(hf_config, "use_bidirectional_attention", False):
            raise ValueError("bidirectional Gemma 3 (EmbeddingGemma) is not supported: our attention is causal")

    def check_activation(self, hf_config) -> None:
        act = getattr(hf_config, "hidden_activation", None) or "gelu_pytorch_tanh"
        if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise ValueError(f"hidden_activation {act!r} is not supported by our Gemma 3 code (only gelu_pytorch_tanh)")


class Gemma3Attention(Qwen3Attention):
    norm_class = GemmaRMSNorm

    def __init__(self, cfg: Gemma3Args, sliding: bool):
        super().__init__(cfg)
        self.scale = cfg.query_scale
        self.window = cfg.sliding_window if sliding else None


class Gemma3MLP(LlamaMLP):
    activation = staticmethod(functools.partial(F.gelu, approximate="tanh"))


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, cfg: Gemma3Args, layer_type: str):
        super().__init__()
        self.sliding = layer_type == "sliding_attention"
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Gemma3Attention(cfg, self.sliding)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Gemma3MLP(cfg)
        self.post_feedforward_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, rope: RopeTables, kv_cache, meta):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rope, kv_cache, meta))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3ForCausalLM(LlamaForCausalLM):
    GGUF_ARCHITECTURES = ("gemma3_text",)
    UNSUPPORTED_DTYPES = (torch.float16,)  # its activations outgrow float16's range (loader refuses it)

    def __init__(self, hf_config, max_positions: int):
        nn.Module.__init__(self)
        cfg = Gemma3Args(hf_config, max_positions)
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(cfg.head_dim, max_positions, cfg.global_rope)
        self.local_rotary = RotaryEmbedding(cfg.head_dim, max_positions, cfg.local_rope)
        self.layers = nn.ModuleList(Gemma3DecoderLayer(cfg, kind) for kind in cfg.layer_types)
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # Gemma 3 always ties its output to the embedding
        self.cfg.tie_word_embeddings = True

    @property
    def attention_layout(self) -> str:
        """What the dashboard and /v1/models say of the attention: "sliding window 512 ×5/6"."""
        local = sum(kind == "sliding_attention" for kind in self.cfg.layer_types)
        return f"sliding window {self.cfg.sliding_window} ×{local}/{len(self.cfg.layer_types)}"

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        return x * torch.tensor(self.cfg.embed_scale, dtype=x.dtype)  # rounded to the activations' dtype, as transformers does

    def forward(self, input_ids, positions, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        x = self.embed(input_ids)
        global_rope = self.rotary.tables(positions, x.dtype)
        local_rope = self.local_rotary.tables(positions, x.dtype)
        for layer, kv_cache in zip(self.layers, kv_caches):
            x = layer(x, local_rope if layer.sliding else global_rope, kv_cache, meta)
        return self.norm(x)

    def gguf_layout(self):
        """llama.cpp's Gemma 3 names: Llama's, plus the per-head Q/K norms and the two post-norms
        (its `ffn_norm` is the pre-feed-forward norm); the output is always the embedding."""
        linears, floats = super().gguf_layout()
        for i in range(self.cfg.num_hidden_layers):
            blk, ours = f"blk.{i}.", f"layers.{i}."
            floats[ours + "self_attn.q_norm.weight"] = blk + "attn_q_norm.weight"
            floats[ours + "self_attn.k_norm.weight"] = blk + "attn_k_norm.weight"
            floats[ours + "post_attention_layernorm.weight"] = blk + "post_attention_norm.weight"
            floats[ours + "pre_feedforward_layernorm.weight"] = blk + "ffn_norm.weight"
            floats[ours + "post_feedforward_layernorm.weight"] = blk + "post_ffw_norm.weight"
        return linears, floats

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Llama's mapping, each norm's weight shifted to the `1 + weight` it multiplies by."""
        shifted = {name: t + 1 if name.endswith("norm.weight") else t for name, t in state.items()}
        super().load_hf_state_dict(shifted)
