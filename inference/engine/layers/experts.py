"""A mixture-of-experts feed-forward: a router picks k of E gated experts per token, and each
chosen expert runs once over the rows that chose it.

`ExpertLinear` holds one projection of every expert: either the GGUF's blocks packed per expert
(experts stacked, [E, channel blocks, bytes], the dense path's block or float layout) for the C++
kernel `expert_linear` (kernels/experts/), which groups rows by expert and never reads an expert
no row chose; or a float tensor [E, out, in] (transformers checkpoints, CUDA, MINIVLLM_CPU_KERNELS=0)
run expert by expert in torch. `SparseMoE` is the layer: router, top-k, the experts' gate/up, the
activation, down, and the weighted sum of each token's k outputs; where both projections are block
kinds, gate/up, the activation and down are one C++ call (`expert_mlp`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import kernels
from .activation import gelu_tanh
from .linear.blocks import BLOCK_SHAPES  # the block kernel's kinds, which expert_mlp takes


class ExpertLinear(nn.Module):
    """One projection of E experts: out[r] = x[row_x[r]] @ W[row_expert[r]].T."""

    def __init__(self, num_experts: int, out_features: int, in_features: int, *, packed=None, kind: str | None = None):
        super().__init__()
        self.num_experts, self.out_features, self.in_features = num_experts, out_features, in_features
        self.kind = kind  # a GGUF type the C++ kernel runs, or None: the float weight below
        if packed is not None:
            self.register_buffer("packed", packed)
            self.weight = None
        else:
            self.packed = None
            self.weight = nn.Parameter(torch.empty(num_experts, out_features, in_features), requires_grad=False)

    def forward(self, x: torch.Tensor, row_x: torch.Tensor, row_expert: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return kernels().expert_linear(x.contiguous(), row_x, row_expert, self.packed, self.out_features, self.kind)
        out = x.new_empty(len(row_x), self.out_features)
        order = torch.argsort(row_expert, stable=True)
        chosen, counts = torch.unique_consecutive(row_expert[order], return_counts=True)
        start = 0
        for expert, count in zip(chosen.tolist(), counts.tolist()):  # each chosen expert once, over all its rows
            rows = order[start : start + count]
            out[rows] = F.linear(x[row_x[rows]], self.weight[expert])
            start += count
        return out

    def extra_repr(self) -> str:
        return f"experts={self.num_experts}, out={self.out_features}, in={self.in_features}, kind={self.kind or 'float'}"


class ExpertParts(nn.Module):
    """Gate and up of different GGUF types: each its own ExpertLinear, outputs side by side."""

    def __init__(self, parts: list[ExpertLinear]):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.out_features = sum(part.out_features for part in parts)

    def forward(self, x, row_x, row_expert):
        return torch.cat([part(x, row_x, row_expert) for part in self.parts], dim=-1)


class Experts(nn.Module):
    """E gated experts: down(act(gate(x)) * up(x)), gate and up fused per expert."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int):
        super().__init__()
        self.intermediate = intermediate
        self.gate_up = ExpertLinear(num_experts, 2 * intermediate, hidden)
        self.down = ExpertLinear(num_experts, hidden, intermediate)

    def forward(self, x: torch.Tensor, expert_ids: torch.Tensor, activation) -> torch.Tensor:
        """x [T, H], expert_ids [T, k] -> each (token, choice)'s output [T * k, H]."""
        is_gelu_tanh = gelu_tanh(activation)
        gate_up, down = self.gate_up, self.down
        if (
            is_gelu_tanh is not None
            and isinstance(gate_up, ExpertLinear)
            and gate_up.kind in BLOCK_SHAPES
            and down.kind in BLOCK_SHAPES
        ):
            # one C++ call: the rows sorted by expert once, each token's x quantized once
            return kernels().expert_mlp(
                x.contiguous(),
                expert_ids.contiguous(),
                gate_up.packed,
                gate_up.kind,
                down.packed,
                down.kind,
                self.intermediate,
                is_gelu_tanh,
            )
        tokens, k = expert_ids.shape
        row_expert = expert_ids.reshape(-1)
        row_x = torch.arange(tokens, device=x.device).repeat_interleave(k)
        gate, up = self.gate_up(x, row_x, row_expert).split(self.intermediate, dim=-1)
        hidden = activation(gate) * up
        return self.down(hidden, torch.arange(tokens * k, device=x.device), row_expert)


def route(logits: torch.Tensor, k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over every expert in float32, the k largest, renormalised to sum to 1 where the
    family does (Qwen3-MoE's norm_topk_prob, Mixtral always: the same as a softmax over the k)."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class SparseMoE(nn.Module):
    """The feed-forward of a mixture-of-experts layer."""

    activation = staticmethod(F.silu)

    def __init__(self, hidden: int, intermediate: int, num_experts: int, top_k: int, renormalize: bool):
        super().__init__()
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.gate = nn.Linear(hidden, num_experts, bias=False)  # the router
        self.experts = Experts(num_experts, hidden, intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        weights, ids = route(self.gate(rows), self.top_k, self.renormalize)
        outputs = self.experts(rows, ids, self.activation).view(rows.shape[0], self.top_k, -1)
        return (outputs * weights.to(outputs.dtype).unsqueeze(-1)).sum(dim=1).view(x.shape)


class SharedExpertMoE(SparseMoE):
    """A mixture of experts with a shared expert every row also runs, scaled by its own sigmoid
    gate (Qwen3.5-MoE, as Qwen2-MoE): `shared` is a dense MLP module of the family's."""

    def __init__(self, hidden: int, intermediate: int, num_experts: int, top_k: int, renormalize: bool, shared: nn.Module):
        super().__init__(hidden, intermediate, num_experts, top_k, renormalize)
        self.shared_expert = shared
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.shared_expert_gate(x).reshape(*x.shape[:-1], 1)  # (a GGUF keeps its one row 1-D)
        return super().forward(x) + torch.sigmoid(gate) * self.shared_expert(x)
