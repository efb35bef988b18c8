"""RMSNorm, the Llama family's normalisation: our one-pass kernel on CPU float32, torch's elsewhere."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .cpu_kernels import cpu_kernels_for


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self._cpp = None  # the kernels, once bind_kernels found they apply

    def bind_kernels(self, device: torch.device, dtype: torch.dtype) -> None:
        """Chosen once at load: one pass in C++ instead of F.rms_norm's six ops on CPU float32."""
        self._cpp = cpu_kernels_for(device, dtype, self.weight.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._cpp is not None:
            return self._cpp.rms_norm(x.contiguous(), self.weight, self.eps)
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
