"""float32 linears on CPU through oneDNN, with weights converted to oneDNN tensors once at load.

MKL's GEMM (what F.linear calls) is slow on this project's CPUs for the shapes a batched
decode makes: a few to a few dozen rows against a wide weight. oneDNN measured 1.7x the
engine's whole decode step at 32 sequences and 1.3x at 8 (docs/performance.md, section 14),
the same at one, and faster on prefill's hundreds of rows. `mkldnn._linear_pointwise` is the
op torch's own compiler emits for this.

The oneDNN weight is a plain attribute, not a parameter or buffer: load the model onto its
device before packing, and do not move it afterwards.
"""
from __future__ import annotations

import torch
from torch import nn

from .linear_swap import replace_linears


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.packed_weight = linear.weight.detach().to_mkldnn()
        self.bias = linear.bias
        self.in_features = linear.in_features
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(rows, self.packed_weight, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def pack_linears(model: nn.Module) -> nn.Module:
    """Replaces every nn.Linear with a PackedLinear (a tied lm_head gets its own packed copy)."""
    return replace_linears(model, lambda _name, linear: PackedLinear(linear))
