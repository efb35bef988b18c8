"""Decode attention in torch (CUDA, bf16, and CPU without our kernels): each decode's blocks
gathered, then two batched matmuls, which beat SDPA's kernel ~5x at these sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .decode_kernels import WindowMasks
from .prefill import gather


@dataclass
class GatheredDecode(WindowMasks):
    block_rows: torch.Tensor  # [kv_heads * B * blocks] block rows of each decode's context (padded)
    padding: torch.Tensor  # [1, B, 1, blocks * block_size] bool, True where a key is padding
    lengths: torch.Tensor  # [B] context length of each decode, its new token included
    window_masks: dict = field(default_factory=dict)

    @classmethod
    def build(cls, cpp, tables: torch.Tensor, lengths: torch.Tensor, *, block_size: int, head_block_offsets) -> GatheredDecode:
        block_rows = (head_block_offsets + tables[None]).reshape(-1)
        padded = tables.shape[1] * block_size
        padding = torch.arange(padded, device=tables.device)[None, :] >= lengths[:, None]
        return cls(block_rows, padding[None, :, None, :], lengths)

    def attend(self, q, k_cache, v_cache, scale: float, window: int | None = None) -> torch.Tensor:
        """Batched over (kv head, sequence) with the query heads of a group as rows (GQA), so K/V
        are never repeated and the gathered blocks feed the matmuls without a copy."""
        batch, heads, dim = q.shape
        kv_heads = k_cache.shape[0]
        group = heads // kv_heads
        keys = gather(k_cache, self.block_rows, kv_heads * batch).to(q.dtype)  # [kv_heads * B, L, D]
        values = gather(v_cache, self.block_rows, kv_heads * batch).to(q.dtype)
        grouped = q.view(batch, kv_heads, group, dim).transpose(0, 1).reshape(kv_heads * batch, group, dim)
        scores = torch.bmm(grouped, keys.transpose(1, 2)).float().mul_(scale)
        masked = self.padding
        if window is not None:
            masked = masked | self.before_window(masked.shape[-1], window)[None, :, None, :]
        scores.view(kv_heads, batch, group, -1).masked_fill_(masked, float("-inf"))
        weights = torch.softmax(scores, dim=-1).to(q.dtype)
        out = torch.bmm(weights, values)  # [kv_heads * B, group, D]
        return out.view(kv_heads, batch, group, dim).transpose(0, 1).reshape(batch, heads, dim)
