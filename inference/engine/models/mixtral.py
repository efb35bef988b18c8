"""Mixtral (and the Llama-architecture MoE GGUFs llama.cpp writes for it: `llama` with
`expert_count`): Llama's attention and, on every layer, a router choosing k of E experts whose
weights are a softmax over the k chosen logits (the same as a softmax over all, renormalised)."""

from __future__ import annotations

from .llama import LlamaArgs, LlamaForCausalLM
from .moe import MoEModel, moe_args


class MixtralForCausalLM(MoEModel, LlamaForCausalLM):
    args_class = moe_args(LlamaArgs)
    GGUF_ARCHITECTURES = ("mixtral",)
