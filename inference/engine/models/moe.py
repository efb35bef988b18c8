"""What the mixture-of-experts families (Qwen3-MoE, Mixtral, OLMoE) add to a Llama-derived model:
sparse layers whose feed-forward is a router and E experts (layers/experts.py), where their GGUF
keeps them (3-D `ffn_*_exps` tensors and `ffn_gate_inp`), and transformers' names for them.

A family is `MoEModel` before its dense class in the bases; its args class is `moe_args(...)` of
the dense one. Everything else (attention, paged KV, loaders, speculation, batching) is the dense
model's: a verified or batched row routes like any row.
"""

from __future__ import annotations

from torch import nn

from ..layers.experts import SparseMoE


class MoEFields:
    """The config fields a mixture of experts reads, normalised across the families' names."""

    def read_experts(self, hf_config) -> None:
        self.num_experts = getattr(hf_config, "num_experts", None) or hf_config.num_local_experts
        self.experts_per_token = hf_config.num_experts_per_tok
        self.moe_intermediate_size = getattr(hf_config, "moe_intermediate_size", None) or hf_config.intermediate_size
        # Mixtral always renormalises the chosen k (a softmax over the k); Qwen3-MoE and OLMoE say so
        self.renormalize = hf_config.model_type == "mixtral" or bool(getattr(hf_config, "norm_topk_prob", False))
        step = getattr(hf_config, "decoder_sparse_step", 1) or 1
        dense = set(getattr(hf_config, "mlp_only_layers", None) or [])
        self.sparse_layers = {i for i in range(self.num_hidden_layers) if i not in dense and (i + 1) % step == 0}


def moe_args(dense_args):
    """`dense_args` (LlamaArgs or a family's) that also reads the expert fields."""

    class Args(dense_args, MoEFields):
        def __init__(self, hf_config, max_positions: int):
            super().__init__(hf_config, max_positions)
            self.read_experts(hf_config)

    Args.__name__ = f"MoE{dense_args.__name__}"
    return Args


class MoEModel:
    """Mixed in before a Llama-derived model class."""

    FUSED_CPU_STEP = False  # the C++ layer step computes dense MLPs only

    def make_layer(self, cfg, index: int) -> nn.Module:
        if index not in cfg.sparse_layers:
            return super().make_layer(cfg, index)
        experts = SparseMoE(cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts, cfg.experts_per_token, cfg.renormalize)
        return self.decoder_layer_class(cfg, mlp=experts)

    @property
    def attention_layout(self) -> str:
        cfg = self.cfg
        return f"{super().attention_layout}, MoE, {cfg.experts_per_token} of {cfg.num_experts} experts"

    def gguf_layout(self):
        """The dense layout with each sparse layer's MLP replaced by its router (a plain linear)."""
        linears, floats = super().gguf_layout()
        for i in self.cfg.sparse_layers:
            for kind in ("weight", "bias"):
                for proj in ("gate_up_proj", "down_proj"):
                    linears.pop(f"layers.{i}.mlp.{proj}.{kind}", None)
            linears[f"layers.{i}.mlp.gate.weight"] = [(f"blk.{i}.ffn_gate_inp.weight", None)]
        return linears, floats

    def gguf_expert_layout(self) -> dict[str, list[str]]:
        """Each sparse layer's expert projections and the 3-D tensors they fuse (gate then up)."""
        layout = {}
        for i in sorted(self.cfg.sparse_layers):
            layout[f"layers.{i}.mlp.experts.gate_up"] = [f"blk.{i}.ffn_gate_exps.weight", f"blk.{i}.ffn_up_exps.weight"]
            layout[f"layers.{i}.mlp.experts.down"] = [f"blk.{i}.ffn_down_exps.weight"]
        return layout

    def load_hf_state_dict(self, state: dict) -> None:
        """transformers keeps each layer's experts as 3-D `experts.gate_up_proj` / `down_proj`
        (gate then up, as ours) and its router as `gate.weight`, which is ours too."""
        renamed = {}
        for name, tensor in state.items():
            if name.endswith("mlp.experts.gate_up_proj"):
                name = name.removesuffix("_proj") + ".weight"
            elif name.endswith("mlp.experts.down_proj"):
                name = name.removesuffix("_proj") + ".weight"
            renamed[name] = tensor
        super().load_hf_state_dict(renamed)
