"""Weight-only int8 per output channel (MINIVLLM_QUANT=int8): the throughput mode on a CPU with AMX
tiles, a latency mode elsewhere (docs/performance-log.md, sections 20 and 35).

A decode step on CPU is bound by reading weights from memory; int8 weights halve the bytes
of bf16 and quarter those of float32. Scales are per output channel and symmetric. Our kernel
(kernels/int8/int8_linear.cpp) rounds each float32 activation row to int16 with its own scale and
sums exact integer products (AVX2, AVX-512BW, AVX-512 VNNI or AMX tiles, the same bits on each). The weights are
kept in the kernel's packed order, which makes each block of channels one sequential read.

Every row, prefill or decode, goes through that kernel, because it is exact per row: a row's
result never depends on the rows beside it, so a request's tokens do not change with the
batch around it. Any BLAS GEMM in the path breaks that (MKL gives a row different low bits
in a batch of 8 than alone).
"""

from __future__ import annotations

import torch
from torch import nn

from ...kernels import kernels
from .base import RowKernelLinear, replace_linears

# Q/K feed softmax through RoPE, where small weight errors flip near-tie tokens most: measured
# on SmolLM2 over 320 teacher-forced positions, plain int8 Q/K/V drops agreement with bf16 from
# ~96.6% to ~94.7%. They get a second int8 level holding what the first one rounded away: the
# weights' error drops ~100x. Still through the kernel: float32 Q/K/V would cost four times the
# bytes and break batch invariance (see above).
TWO_LEVEL = ("qkv_proj", "c_attn")


def _quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 with float32 scales."""
    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    quantized = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return quantized, scales


class Int8Linear(RowKernelLinear):
    def __init__(self, linear: nn.Linear, two_level: bool = False):
        """`two_level`: add a second int8 weight holding the first one's rounding error."""
        super().__init__()
        weight = linear.weight.detach().float()
        levels = []
        for _ in range(2 if two_level else 1):
            quantized, scales = _quantize_rows(weight)
            levels.append((quantized, scales))
            weight = weight - quantized.float() * scales[:, None]
        self.levels = len(levels)
        for i, (quantized, scales) in enumerate(levels):
            self.register_buffer(f"packed_int8_{i}", kernels().int8_pack_weight(quantized))
            self.register_buffer(f"scales_{i}", scales)
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def weight_levels(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The int8 weights (in the kernel's packed order) and their scales, level by level."""
        buffers = self._buffers  # direct: this runs ~120 times a decode step on the module path
        return [buffers[f"packed_int8_{i}"] for i in range(self.levels)], [buffers[f"scales_{i}"] for i in range(self.levels)]

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        """rows (contiguous float32 [M, K]) @ W.T, no bias."""
        return kernels().int8_linear(rows, *self.weight_levels())

    def projection(self, cpp):
        return cpp.Projection.int8(*self.weight_levels(), self.bias)


def quantize_int8(model: nn.Module, two_level: tuple[str, ...] = TWO_LEVEL) -> nn.Module:
    """Replaces every nn.Linear (lm_head included, untied from the embedding) with Int8Linear,
    those named in `two_level` with two int8 levels."""

    def build(name: str, linear: nn.Linear) -> Int8Linear:
        if linear.in_features % 8:
            raise ValueError(f"MINIVLLM_QUANT=int8: {name} has {linear.in_features} inputs; the kernel needs a multiple of 8")
        return Int8Linear(linear, two_level=name in two_level)

    return replace_linears(model, build)
