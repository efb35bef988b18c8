"""Qwen3: the Llama family's layers plus an RMSNorm over each head of Q and K before RoPE, and no QKV bias.

Everything else (fused QKV and gate/up, the paged attention, the loaders, the linear formats, the
fused C++ CPU step, which takes the Q/K norms) is Llama's; its GGUF files add the two norms to
Llama's layout.
"""

from __future__ import annotations

import torch

from ..layers.norm import RMSNorm
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM


class Qwen3Attention(LlamaAttention):
    norm_class = RMSNorm  # Gemma's multiplies in float32

    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_norm = self.norm_class(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = self.norm_class(cfg.head_dim, cfg.rms_norm_eps)

    def normed_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """Each head normalised over its own head_dim."""
        return torch.cat([self.q_norm(qk[:, : self.num_heads]), self.k_norm(qk[:, self.num_heads :])], dim=1)


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_class = Qwen3Attention


class Qwen3ForCausalLM(LlamaForCausalLM):
    decoder_layer_class = Qwen3DecoderLayer
    GGUF_ARCHITECTURES = ("qwen3",)

    def gguf_layout(self):
        return with_qk_norms(*super().gguf_layout(), self.cfg.num_hidden_layers)


def with_qk_norms(linears: dict, floats: dict, layers: int) -> tuple[dict, dict]:
    """A GGUF layout plus each layer's Q and K norm weights (`attn_q_norm` / `attn_k_norm`), which
    the families with them (Qwen3, OLMoE) keep under the same names."""
    for i in range(layers):
        for norm in ("q_norm", "k_norm"):
            floats[f"layers.{i}.self_attn.{norm}.weight"] = f"blk.{i}.attn_{norm}.weight"
    return linears, floats
