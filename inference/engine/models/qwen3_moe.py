"""Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention (per-head Q/K norms) and, on
its sparse layers (every layer unless `mlp_only_layers` / `decoder_sparse_step` say otherwise), a
softmax router over E experts, the top k renormalised where `norm_topk_prob` says (the published
models do; llama.cpp always does for `qwen3moe` files, whose config is read with it set)."""

from __future__ import annotations

from .llama import LlamaArgs
from .moe import MoEModel, moe_args
from .qwen3 import Qwen3ForCausalLM


class Qwen3MoeForCausalLM(MoEModel, Qwen3ForCausalLM):
    args_class = moe_args(LlamaArgs)
    GGUF_ARCHITECTURES = ("qwen3_moe",)
