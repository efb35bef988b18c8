"""Qwen3.5-MoE (Qwen3.5-35B-A3B and larger): Qwen3.5's hybrid layers (models/qwen3_5.py) with every
feed-forward a mixture of experts plus a shared expert: a softmax router whose top k are always
renormalised, the experts on our grouped expert kernels (layers/experts.py), and a shared dense
expert every row runs, scaled by its own sigmoid gate. llama.cpp's `qwen35moe` files keep the
experts as 3-D `ffn_*_exps` tensors and the shared expert as `ffn_*_shexp`."""

from __future__ import annotations

from torch import nn

from ..layers.experts import SharedExpertMoE
from .llama import LlamaMLP
from .moe import MoEFields, MoEModel
from .qwen3_5 import Qwen35Args, Qwen35DecoderLayer, Qwen35ForCausalLM, text_config


class Qwen35MoeArgs(Qwen35Args, MoEFields):
    def __init__(self, hf_config, max_positions: int):
        super().__init__(hf_config, max_positions)
        self.read_experts(hf_config)
        self.renormalize = True  # the router always divides the top k by their sum
        self.shared_expert_intermediate_size = hf_config.shared_expert_intermediate_size


class SharedExpertMLP(LlamaMLP):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.intermediate = cfg.shared_expert_intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * self.intermediate, bias=False)
        self.down_proj = nn.Linear(self.intermediate, cfg.hidden_size, bias=False)


class Qwen35MoeForCausalLM(MoEModel, Qwen35ForCausalLM):
    args_class = Qwen35MoeArgs
    GGUF_ARCHITECTURES = ("qwen3_5_moe_text",)  # llama.cpp's `qwen35moe` files

    def make_layer(self, cfg, index: int) -> nn.Module:
        if index not in cfg.sparse_layers:
            return Qwen35DecoderLayer(cfg, cfg.layer_types[index])
        experts = SharedExpertMoE(
            cfg.hidden_size,
            cfg.moe_intermediate_size,
            cfg.num_experts,
            cfg.experts_per_token,
            cfg.renormalize,
            SharedExpertMLP(cfg),
        )
        return Qwen35DecoderLayer(cfg, cfg.layer_types[index], mlp=experts)

    def gguf_layout(self):
        """Qwen3.5's layout, the experts' routers (MoEModel), and each shared expert and its gate."""
        linears, floats = super().gguf_layout()
        for i in self.cfg.sparse_layers:
            blk, shared = f"blk.{i}.", f"layers.{i}.mlp.shared_expert."
            linears[shared + "gate_up_proj.weight"] = [(blk + "ffn_gate_shexp.weight", None), (blk + "ffn_up_shexp.weight", None)]
            linears[shared + "down_proj.weight"] = [(blk + "ffn_down_shexp.weight", None)]
            floats[f"layers.{i}.mlp.shared_expert_gate.weight"] = blk + "ffn_gate_inp_shexp.weight"  # one row, kept 1-D
        return linears, floats


__all__ = ["Qwen35MoeForCausalLM", "text_config"]
