"""The one answer to "can our C++ kernels run here?", asked once per layer at load, never per call.

They take float32 activations on CPU, in rows whose width is a multiple of 8 (one AVX2 vector),
and exist only where the module was built (AVX2 and a compiler; kernels/__init__.py). A layer
that gets the module binds it (RMSNorm, RotaryEmbedding, the decode attention, the fused layer
step); one that gets None keeps its torch implementation, which is also the CUDA one.
"""

from __future__ import annotations

import torch

from ..kernels import kernels

SIMD_WIDTH = 8  # float32 lanes in one AVX2 register


def cpu_kernels_for(device: torch.device, dtype: torch.dtype, *widths: int):
    """The kernels module where it applies to activations of `dtype` on `device` with these row widths, else None."""
    if device.type != "cpu" or dtype != torch.float32 or any(width % SIMD_WIDTH for width in widths):
        return None
    return kernels()


def bind_cpu_kernels(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
    """At load, after the model is on its device and dtype: every layer with a kernel version
    (a `bind_kernels(device, dtype)` method) picks its implementation for good."""
    for module in model.modules():
        bind = getattr(module, "bind_kernels", None)
        if bind is not None:
            bind(device, dtype)
