"""OLMoE (allenai/OLMoE-1B-7B): Llama's layers with an RMSNorm over the whole Q projection and one
over the whole K projection (not per head, as Qwen3's), and a softmax router choosing 8 of 64
experts whose weights are not renormalised (`norm_topk_prob` false, as llama.cpp runs `olmoe`)."""

from __future__ import annotations

import torch

from ..layers.norm import RMSNorm
from .llama import LlamaArgs, LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM
from .moe import MoEModel, moe_args
from .qwen3 import with_qk_norms


class OlmoeArgs(LlamaArgs):
    def __init__(self, hf_config, max_positions: int):
        super().__init__(hf_config, max_positions)
        if getattr(hf_config, "clip_qkv", None) is not None:
            raise ValueError("OLMoE's clip_qkv is not supported (the published OLMoE models leave it unset)")


class OlmoeAttention(LlamaAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_norm = RMSNorm(self.q_size, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.kv_size, cfg.rms_norm_eps)

    def normed_qk(self, qk: torch.Tensor) -> torch.Tensor:
        tokens, heads = qk.shape[0], self.num_heads
        q = self.q_norm(qk[:, :heads].reshape(tokens, self.q_size))
        k = self.k_norm(qk[:, heads:].reshape(tokens, self.kv_size))
        return torch.cat([q, k], dim=1).view(qk.shape)


class OlmoeDecoderLayer(LlamaDecoderLayer):
    attention_class = OlmoeAttention


class OlmoeForCausalLM(MoEModel, LlamaForCausalLM):
    decoder_layer_class = OlmoeDecoderLayer
    args_class = moe_args(OlmoeArgs)
    GGUF_ARCHITECTURES = ("olmoe",)

    def gguf_layout(self):
        return with_qk_norms(*super().gguf_layout(), self.cfg.num_hidden_layers)
