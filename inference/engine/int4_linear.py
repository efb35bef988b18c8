"""Weight-only 4-bit linears (MINIVLLM_QUANT=int4), the low-latency mode for one to a few streams.

One stream's decode step reads every weight once, so it takes the weights' bytes over the
memory bandwidth. 4 bits in groups of 32 with a float16 scale and minimum each are 0.625 bytes a
weight: SmolLM2's layers drop from 122 MB as int8 (Q/K/V in two levels) to 66 MB. The format is
llama.cpp's Q4_1, the embedded GGUF's own, with Q4_1's choice of minimum and scale (the group's
minimum, (max - min) / 15; levels rounded against their float16 values), which gives the GGUF's
weights back where the loaded weights are its de-quantized ones (a test); from other checkpoints
it is an ordinary 4-bit quantization.

The kernel (kernels/int4_linear.cpp) rounds activation rows to int16 like int8's, sums each
group's products as exact integers and fixes the order of every float operation after them, so a
row's result does not depend on its batch. Linears whose inputs are not whole groups of 32, and
the lm_head (the tied embedding, Q8_0 in the GGUF), stay int8.
"""
from __future__ import annotations

import torch
from torch import nn

from .kernels import kernels
from .linear_swap import RowKernelLinear, replace_linears

GROUP = 32


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Levels (uint8 0..15, [N, K]), float16 scales and minimums ([N, K / 32]) of a float [N, K] weight."""
    rows, columns = weight.shape
    if columns % GROUP:
        raise ValueError(f"4-bit groups need inputs in multiples of {GROUP}, not {columns}")
    groups = weight.detach().float().reshape(rows, columns // GROUP, GROUP)
    low, high = groups.amin(dim=2), groups.amax(dim=2)
    scales, minimums = ((high - low) / 15).half(), low.half()
    if not (torch.isfinite(scales).all() and torch.isfinite(minimums).all()):
        raise ValueError("weights beyond float16's range cannot be quantized to 4-bit groups")
    step = scales.float()[..., None]
    levels = torch.where(step > 0, torch.round((groups - minimums.float()[..., None]) / step), 0).clamp(0, 15)
    return levels.to(torch.uint8).reshape(rows, columns), scales, minimums


def dequantize_groups(levels: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor) -> torch.Tensor:
    """The float32 weight that 4-bit groups stand for."""
    rows, columns = levels.shape
    groups = levels.float().reshape(rows, columns // GROUP, GROUP)
    return (groups * scales.float()[..., None] + minimums.float()[..., None]).reshape(rows, columns)


class Int4Linear(RowKernelLinear):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.register_buffer("packed_int4", kernels().int4_pack_weight(*quantize_groups(linear.weight)))
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        """rows (contiguous float32 [M, K]) @ W.T, no bias."""
        return kernels().int4_linear(rows, self.packed_int4, self.out_features)


def quantize_int4(model: nn.Module) -> nn.Module:
    """Replaces every nn.Linear whose inputs are whole groups of 32, but the lm_head, with Int4Linear."""
    def build(name: str, linear: nn.Linear) -> nn.Module:
        return Int4Linear(linear) if name != "lm_head" and linear.in_features % GROUP == 0 else linear

    return replace_linears(model, build)
