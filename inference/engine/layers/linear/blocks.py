"""Linears over a GGUF file's own tensors: its k-quant, 5-bit and IQ4 blocks (kernels/blocks/),
its float16 / bfloat16 matrices (kernels/floats/), and what lets a fused projection mix tensor types.

A Q4_K_M file mixes Q4_K and Q6_K tensors (and Q5_0 / Q8_0 where a row is not whole 256-weight
blocks), so every linear keeps its own tensor's type: `BlockLinear` for the block kernel's types,
`GroupLinear` (groups.py) for Q4_0 / Q4_1 / Q8_0, and `PartsLinear` where a fused Q/K/V or
gate/up joins tensors of different types (each part's outputs side by side). The blocks are
re-packed at load into the kernel's 16-channel layout, about the file's own size; no float copy
of a weight is made. `FileEmbedding` reads token rows straight from the mapped file.
"""

from __future__ import annotations

import torch
from torch import nn

from ...kernels import kernels
from .base import RowKernelLinear

BLOCK_SHAPES = {  # GGUF type: (weights a block, bytes a block)
    "q5_0": (32, 22),
    "q5_1": (32, 24),
    "iq4_nl": (32, 18),
    "q2_k": (256, 84),
    "q3_k": (256, 110),
    "q4_k": (256, 144),
    "q5_k": (256, 176),
    "q6_k": (256, 210),
    "iq4_xs": (256, 136),
}


def pack_file_weights(specs: list[tuple[list[torch.Tensor], int, str, torch.Tensor | None]]) -> list[torch.Tensor]:
    """Every (raws, columns, kind, row order) weight packed for its kernel in one C++ call: the
    GIL stays released for the whole packing, so the tokenizer loading beside it (Python) never makes
    it wait for the GIL between tensors (127 small calls waited ~2 s in all for a 1.5B model)."""
    return kernels().pack_file_weights(specs)


class BlockLinear(RowKernelLinear):
    """A linear whose weight is one GGUF block type, packed for the block kernel (pack_file_weights)."""

    def __init__(self, packed: torch.Tensor, out_features: int, in_features: int, kind: str, bias: torch.Tensor | None = None):
        super().__init__()
        self.kind = kind
        self.register_buffer("packed", packed)
        self.bias = bias
        self.out_features, self.in_features = out_features, in_features

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        return kernels().block_linear(rows, self.packed, self.out_features, self.kind)

    def projection(self, cpp):
        return cpp.Projection.block(self.packed, self.out_features, self.kind, self.bias)


class FloatLinear(BlockLinear):
    """A linear over a GGUF's float16 / bfloat16 / float32 matrix, packed for the float kernel
    (kernels/floats/): the file's values widened to float32 as each step loads them."""

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        return kernels().float_linear(rows, self.packed, self.out_features, self.kind)

    def projection(self, cpp):
        return cpp.Projection.float_weights(self.packed, self.out_features, self.kind, self.bias)


class PartsLinear(RowKernelLinear):
    """Linears of different weight formats over the same input, their outputs concatenated:
    a fused projection whose tensors the file stores in different types."""

    def __init__(self, parts: list[RowKernelLinear], bias: torch.Tensor | None = None):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.bias = bias
        self.in_features = parts[0].in_features
        self.out_features = sum(part.out_features for part in parts)

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.cat([part.matmul(rows) for part in self.parts], dim=-1)

    def projection(self, cpp):
        return cpp.Projection.parts([part.projection(cpp) for part in self.parts], self.bias)


class FileEmbedding(nn.Module):
    """A token embedding read from the file's own rows of any type (gguf-py's values, bit for bit):
    only the rows a step looks up are de-quantized, and only their pages of the mapped file are read."""

    def __init__(self, raw: torch.Tensor, columns: int, kind: str):
        super().__init__()
        self.raw, self.kind = raw, kind  # a view of the mapped file, not a buffer: nothing to copy or save
        self.embedding_dim = columns

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return kernels().gguf_dequantize_rows(self.raw, self.embedding_dim, self.kind, ids)
