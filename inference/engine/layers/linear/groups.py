"""Linears over weights in groups of 32 with int8 activation groups: the formats of llama.cpp's
Q4_1 / Q4_0 (4-bit, MINIVLLM_QUANT=int4) and Q8_0 (8-bit, MINIVLLM_QUANT=q8_0).

One stream's decode step reads every weight once, so 4-bit groups (0.625 bytes a weight with
their float16 scale and minimum) make it ~1.6x faster than int8 per channel. In a batch the
products are the cost: the kernel (kernels/groups/group_linear.cpp, group_dot.h) holds each row's
activations as two int8 levels per group of 32 (15 bits: one level, llama.cpp's Q8_1, lost too
many greedy tokens), so VNNI's byte dot products (or AVX2's vpmaddubsw) serve up to 12 rows from
one unpacked weight register: at 32 rows a [3072 x 576] call took ~420 us against 726 with the
earlier int16-activation kernel (docs/performance-log.md, section 37).

Each row is rounded alone and its float operations run in a fixed order, so a request's output
does not depend on its batch, and every ISA gives the same bits. A GGUF's own blocks are the
levels, scales and minimums as they are (gguf/weights.py); from a float checkpoint they are
quantized as llama.cpp quantizes, which gives a GGUF's de-quantized weights back exactly (a test).
"""

from __future__ import annotations

import torch
from torch import nn

from ...kernels import kernels
from .base import RowKernelLinear

GROUP = 32


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """4-bit levels (uint8 0..15, [N, K]), float16 scales and minimums ([N, K / 32]) of a float
    [N, K] weight, as Q4_1: the group's minimum, (max - min) / 15, levels rounded against the float16 values."""
    rows, columns = weight.shape
    if columns % GROUP:
        raise ValueError(f"4-bit groups need inputs in multiples of {GROUP}, not {columns}")
    groups = weight.detach().float().reshape(rows, columns // GROUP, GROUP)
    low, high = groups.amin(dim=2), groups.amax(dim=2)
    scales, minimums = ((high - low) / 15).half(), low.half()
    _check_finite(scales, minimums)
    step = scales.float()[..., None]
    levels = torch.where(step > 0, torch.round((groups - minimums.float()[..., None]) / step), 0).clamp(0, 15)
    return levels.to(torch.uint8).reshape(rows, columns), scales, minimums


def quantize_groups_8bit(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """8-bit levels (uint8, q + 128), float16 scales and minimums (-128 * scale) of a float [N, K]
    weight, as Q8_0: scale = max |w| / 127, q = round(w / scale)."""
    rows, columns = weight.shape
    if columns % GROUP:
        raise ValueError(f"8-bit groups need inputs in multiples of {GROUP}, not {columns}")
    groups = weight.detach().float().reshape(rows, columns // GROUP, GROUP)
    scales = (groups.abs().amax(dim=2) / 127).half()
    _check_finite(scales, scales * 128)
    step = scales.float()[..., None]
    q = torch.where(step > 0, torch.round(groups / step), 0).clamp(-127, 127)
    return (q + 128).to(torch.uint8).reshape(rows, columns), scales, offset_minimums(scales, 128)


def offset_minimums(scales: torch.Tensor, offset: int) -> torch.Tensor:
    """The minimums of levels stored as q + offset (Q8_0: 128, Q4_0: 8): -offset * scale, exact in float16."""
    return (scales.float() * -offset).half()


def _check_finite(*tensors: torch.Tensor) -> None:
    if not all(torch.isfinite(t).all() for t in tensors):
        raise ValueError("weights beyond float16's range cannot be stored in groups")


class GroupLinear(RowKernelLinear):
    """A linear whose weight is 4- or 8-bit groups, packed once for the kernel."""

    def __init__(self, packed: torch.Tensor, out_features: int, in_features: int, bits: int, bias: torch.Tensor | None = None):
        """Over groups packed for the kernel (`pack`): by `from_linear`, or by gguf/weights.py from a
        GGUF's own groups or from the packed cache of an earlier start."""
        super().__init__()
        self.bits = bits
        self.register_buffer("packed", packed)
        self.bias = bias
        self.out_features, self.in_features = out_features, in_features

    @staticmethod
    def pack(levels: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, bits: int) -> torch.Tensor:
        """The kernel's layout of the groups (uint8 [channel blocks, bytes]): what the packed cache keeps."""
        return kernels().group_pack_weight(levels, scales, minimums, bits)

    @classmethod
    def from_linear(cls, linear: nn.Linear, bits: int) -> GroupLinear:
        quantize = quantize_groups if bits == 4 else quantize_groups_8bit
        levels, scales, minimums = quantize(linear.weight)
        return cls(cls.pack(levels, scales, minimums, bits), *levels.shape, bits=bits, bias=linear.bias)

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        """rows (contiguous float32 [M, K]) @ W.T, no bias."""
        return kernels().group_linear(rows, self.packed, self.out_features, self.bits)

    def projection(self, cpp):
        return cpp.Projection.group(self.packed, self.out_features, self.bits, self.bias)

    def embedding(self) -> GroupEmbedding:
        """The same packed rows as an embedding table (a tied lm_head's)."""
        return GroupEmbedding(self)


class GroupEmbedding(nn.Module):
    """An embedding table kept as packed groups: a lookup de-quantizes only the rows it reads,
    so a tied embedding costs no float32 copy (113 MB for SmolLM2's)."""

    def __init__(self, table: GroupLinear):
        super().__init__()
        self.table = [table]  # a plain list: the lm_head owns the buffer; no second registration
        self.embedding_dim = table.in_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        table = self.table[0]
        return kernels().group_dequantize_rows(table.packed, ids, table.in_features, table.bits)
