"""RMSNorm, the Llama family's normalisation: our one-pass kernel on CPU float32, torch's elsewhere."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import kernels


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cpp = kernels() if x.device.type == "cpu" and x.dtype == torch.float32 and x.shape[-1] % 8 == 0 else None
        if cpp is not None:  # one pass instead of F.rms_norm's six ops on CPU
            return cpp.rms_norm(x.contiguous(), self.weight, self.eps)
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
