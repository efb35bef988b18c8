"""Decode attention by our kernels (kernels/attention/): K/V blocks read where they lie, through
each sequence's block table, with no gathered copy; a torch softmax between scores and values.
CPU float32 queries over a float32 or float16 cache (choose_decode_attention decides)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class WindowMasks:
    """A step's sliding-window masks, made once per window and shared by that window's layers."""

    window_masks: dict

    def before_window(self, width: int, window: int) -> torch.Tensor:
        """[B, width] bool: True at the key positions a decode's sliding window leaves out (the
        window holds the decode's own token and the `window - 1` before it)."""
        mask = self.window_masks.get((width, window))
        if mask is None:
            mask = torch.arange(width, device=self.lengths.device)[None, :] < (self.lengths[:, None] - window)
            self.window_masks[(width, window)] = mask
        return mask


@dataclass
class KernelDecode(WindowMasks):
    cpp: object  # the kernels module
    tables: torch.Tensor  # [B, blocks] int64 block tables (stale past each context's end)
    lengths: torch.Tensor  # [B] int64 context length of each decode, its new token included
    window_masks: dict = field(default_factory=dict)

    @classmethod
    def build(cls, cpp, tables: torch.Tensor, lengths: torch.Tensor, *, block_size: int, head_block_offsets) -> KernelDecode:
        return cls(cpp, tables, lengths)

    def attend(self, q, k_cache, v_cache, scale: float, window: int | None = None) -> torch.Tensor:
        scores = self.cpp.paged_attention_scores(q.contiguous(), k_cache, self.tables, self.lengths, scale)
        if window is not None:  # the kernel scores the whole context; keys before the window drop out here
            scores.masked_fill_(self.before_window(scores.shape[-1], window)[:, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return self.cpp.paged_attention_values(probs, v_cache, self.tables, self.lengths)
