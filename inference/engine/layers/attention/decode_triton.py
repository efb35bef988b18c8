"""Decode attention on CUDA by a Triton kernel that reads each sequence's K/V blocks where they
lie in the pool, through its block table: no gathered copy (the gathered path reads and writes
every context padded to the longest, ~3x the bytes), and shapes that do not depend on context
lengths, so a decode step can be captured in a CUDA graph (runner/decode_graphs.py).

One program per (decode row, kv head) computes all the query heads of that kv head's group
(GQA), walking the row's blocks with an online softmax in float32. The gathered path
(decode_gathered.py) is its reference; the tests run this kernel under TRITON_INTERPRET=1 on CPU.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import torch

WHOLE_CONTEXT = 1 << 30  # the window passed for a layer without one: longer than any context


def triton_available() -> bool:
    """CUDA builds of torch ship Triton; CPU builds come without it (the gathered path serves)."""
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _kernel():
    """The kernel and Triton's next_power_of_2, imported at first use (under TRITON_INTERPRET=1,
    which Triton reads when first imported, the kernel runs on the CPU)."""
    from . import triton_paged_decode

    return triton_paged_decode.paged_decode_kernel, triton_paged_decode.next_power_of_2


def paged_decode(q, k_cache, v_cache, tables, lengths, scale: float, window: int | None = None) -> torch.Tensor:
    """[B, heads, head_dim] attention of each decode row over its context (its last `window` keys
    where a window is given), read in place."""
    batch, heads, dim = q.shape
    kv_heads, num_blocks, block_size, _ = k_cache.shape
    group = heads // kv_heads
    q = q.contiguous()
    out = torch.empty_like(q)
    if batch:
        kernel, next_power_of_2 = _kernel()
        kernel[(batch, kv_heads)](
            q,
            k_cache,
            v_cache,
            tables,
            lengths,
            out,
            scale,
            window or WHOLE_CONTEXT,
            tables.stride(0),
            num_blocks,
            GROUP=group,
            HEAD_DIM=dim,
            BLOCK_SIZE=block_size,
            BLOCK_G=next_power_of_2(group),
            BLOCK_D=next_power_of_2(dim),
        )
    return out


@dataclass
class TritonDecode:
    tables: torch.Tensor  # [B, blocks] int64 block tables (stale past each context's end)
    lengths: torch.Tensor  # [B] int64 context length of each decode, its new token included

    @classmethod
    def build(cls, cpp, tables: torch.Tensor, lengths: torch.Tensor, *, block_size: int, head_block_offsets) -> TritonDecode:
        return cls(tables, lengths)

    def attend(self, q, k_cache, v_cache, scale: float, window: int | None = None) -> torch.Tensor:
        return paged_decode(q, k_cache, v_cache, self.tables, self.lengths, scale, window)
