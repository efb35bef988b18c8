"""Decode attention by our kernels (kernels/attention/): K/V blocks read where they lie, through
each sequence's block table, with no gathered copy; a torch softmax between scores and values.
CPU float32 queries over a float32 or float16 cache (choose_decode_attention decides)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KernelDecode:
    cpp: object  # the kernels module
    tables: torch.Tensor  # [B, blocks] int64 block tables (stale past each context's end)
    lengths: torch.Tensor  # [B] int64 context length of each decode, its new token included

    @classmethod
    def build(cls, cpp, tables: torch.Tensor, lengths: torch.Tensor, *, block_size: int, head_block_offsets) -> KernelDecode:
        return cls(cpp, tables, lengths)

    def attend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        scores = self.cpp.paged_attention_scores(q.contiguous(), k_cache, self.tables, self.lengths, scale)
        probs = torch.softmax(scores, dim=-1)
        return self.cpp.paged_attention_values(probs, v_cache, self.tables, self.lengths)
