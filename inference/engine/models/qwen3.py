"""Qwen3: the Llama family's layers plus an RMSNorm over each head of Q and K before RoPE, and no QKV bias.

Everything else (fused QKV and gate/up, the paged attention, the loaders, the linear formats) is
Llama's. The fused C++ CPU step computes Llama's layers exactly, without the Q/K norms, so Qwen3
keeps the modules (FUSED_CPU_STEP); its GGUF files add the two norms to Llama's layout.
"""

from __future__ import annotations

import torch

from ..layers.attention import AttentionMetadata, paged_attention
from ..layers.norm import RMSNorm
from ..layers.rotary import RopeTables
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM


class Qwen3Attention(LlamaAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x, rope: RopeTables, kv_cache, meta: AttentionMetadata):
        tokens, heads, kv_heads = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(tokens, heads + 2 * kv_heads, self.head_dim)
        q = self.q_norm(qkv[:, :heads])  # each head normalised over its own head_dim
        k = self.k_norm(qkv[:, heads : heads + kv_heads])
        qk = rope.rotate_(torch.cat([q, k], dim=1))
        out = paged_attention(
            qk[:, :heads], qk[:, heads:], qkv[:, heads + kv_heads :], kv_cache[0], kv_cache[1], meta, self.scale
        )
        return self.o_proj(out.reshape(tokens, self.q_size))


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_class = Qwen3Attention


class Qwen3ForCausalLM(LlamaForCausalLM):
    decoder_layer_class = Qwen3DecoderLayer
    FUSED_CPU_STEP = False
    GGUF_ARCHITECTURES = ("qwen3",)

    def gguf_layout(self):
        linears, floats = super().gguf_layout()
        for i in range(self.cfg.num_hidden_layers):
            for norm in ("q_norm", "k_norm"):
                floats[f"layers.{i}.self_attn.{norm}.weight"] = f"blk.{i}.attn_{norm}.weight"
        return linears, floats
