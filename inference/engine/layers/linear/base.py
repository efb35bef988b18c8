"""Swapping a loaded model's nn.Linear layers for a faster kind (int8, groups, packed float32)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def replace_linears(model: nn.Module, build: Callable[[str, nn.Linear], nn.Module]) -> nn.Module:
    """Replaces every nn.Linear, wherever it sits, with `build(its attribute name, it)` (which may
    return it unchanged, to leave it for another kind)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, build(name, child))
    return model


class RowKernelLinear(nn.Module):
    """A linear whose kernel takes contiguous float32 rows (`matmul`, no bias): what any input
    shape and dtype, and the bias, need around it (Int8Linear, GroupLinear)."""

    bias: torch.Tensor | None
    out_features: int

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.matmul(x.reshape(-1, x.shape[-1]).float().contiguous()).to(x.dtype)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)
