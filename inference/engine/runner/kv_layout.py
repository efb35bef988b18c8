"""Where each layer's K/V lives: the full-attention pool, or the sliding-window layers' own pool
(window_blocks.py), which holds each sequence's window only. A layer's place follows its window:
`model.layer_windows()` where the model has sliding-window layers, else every layer is full."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kv_pool import allocate_kv_pool
from ..window_blocks import WindowBlocks
from .block_tables import BlockTables


def layer_windows(model) -> list[int | None]:
    """Each layer's sliding window, None for full attention."""
    windows = getattr(model, "layer_windows", None)
    return list(windows()) if windows is not None else [None] * model.kv_shape[0]


def model_window(model) -> int | None:
    """The window the sliding-window pool keeps per sequence (the widest, where layers differ)."""
    return max((w for w in layer_windows(model) if w is not None), default=None)


def window_pool_blocks(model, block_size: int, num_slots: int, step_tokens: int, max_model_len: int) -> int:
    """The sliding-window pool's blocks (0 for a model without sliding-window layers)."""
    window = model_window(model)
    return 0 if window is None else WindowBlocks.pool_size(num_slots, window, block_size, step_tokens, max_model_len)


def split_kv_shape(model) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(full-attention layers, kv heads, head dim) and the same for the sliding-window layers."""
    windows = layer_windows(model)
    _, kv_heads, head_dim = model.kv_shape
    windowed = sum(w is not None for w in windows)
    return (len(windows) - windowed, kv_heads, head_dim), (windowed, kv_heads, head_dim)


@dataclass
class KVGroup:
    """One pool's addressing: its blocks (one past the block manager's: a padding or null block),
    each kv head's offset in its head-major layout, and the device copy of its sequences' tables."""

    pool_blocks: int
    block_size: int
    tables: BlockTables
    head_slot_offsets: torch.Tensor
    head_block_offsets: torch.Tensor
    window: int | None = None  # the sliding-window pool's window

    @classmethod
    def create(cls, num_blocks: int, block_size: int, kv_heads: int, device, window: int | None = None) -> KVGroup:
        pool_blocks = num_blocks + 1
        heads = torch.arange(kv_heads, device=device)
        return cls(
            pool_blocks,
            block_size,
            BlockTables(device, windowed=window is not None),
            (heads * pool_blocks * block_size)[:, None],
            (heads * pool_blocks)[:, None, None],
            window,
        )

    def table(self, seq) -> list[int]:
        return seq.window_table if self.window is not None else seq.block_table

    def slot(self, seq, position: int) -> int:
        return self.table(seq)[position // self.block_size] * self.block_size + position % self.block_size

    def first_block(self, position: int) -> int:
        """The first block a query at `position` reads: 0, or its window's first."""
        return 0 if self.window is None else max(0, position - self.window + 1) // self.block_size


def allocate_layer_caches(model, full: KVGroup, window: KVGroup | None, dtype, device):
    """Each layer's (K, V) pair, in its group's pool, in layer order; and whether each is in the window pool."""
    windows = layer_windows(model)
    _, kv_heads, head_dim = model.kv_shape
    full_layers = [i for i, w in enumerate(windows) if w is None or window is None]
    pools = {
        i: pair
        for i, pair in zip(
            full_layers,
            allocate_kv_pool((len(full_layers), kv_heads, head_dim), full.pool_blocks, full.block_size, dtype, device),
        )
    }
    if window is not None:
        window_layers = [i for i, w in enumerate(windows) if w is not None]
        shape = (len(window_layers), kv_heads, head_dim)
        pools.update(zip(window_layers, allocate_kv_pool(shape, window.pool_blocks, window.block_size, dtype, device)))
    return [pools[i] for i in range(len(windows))], [i not in full_layers for i in range(len(windows))]
