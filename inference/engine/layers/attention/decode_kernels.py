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

    def attend(self, q, k_cache, v_cache, scale: float, window: int | None = None) -> torch.Tensor:
        scores = self.cpp.paged_attention_scores(q.contiguous(), k_cache, self.tables, self.lengths, scale)
        if window is not None:  # the kernel scores the whole context; keys before the window drop out here
            scores.masked_fill_(before_window(self.lengths, scores.shape[-1], window)[:, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return self.cpp.paged_attention_values(probs, v_cache, self.tables, self.lengths)


def before_window(lengths: torch.Tensor, width: int, window: int) -> torch.Tensor:
    """[B, width] bool: True at the key positions a decode's sliding window leaves out (the window
    holds the decode's own token and the `window - 1` before it)."""
    return torch.arange(width, device=lengths.device)[None, :] < (lengths[:, None] - window)
