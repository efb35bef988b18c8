"""Every running sequence's block table, kept on the device in the row of its batch slot.

A table changes only when a sequence gains a block (every block_size tokens), gives guessed ones
back, or a slot changes hands; so a step uploads only the entries that differ from what the
device already holds (usually none), instead of every table of the batch. A host mirror of each
row says what the device holds. Rows and columns grow as slots and contexts need them.
"""

from __future__ import annotations

import torch

from ..sequence import Sequence
from .transfers import to_device


def _first_difference(held: list[int], table: list[int]) -> int:
    if table[: len(held)] == held:
        return len(held)
    return next((i for i, (a, b) in enumerate(zip(held, table)) if a != b), min(len(held), len(table)))


class BlockTables:
    def __init__(self, device: torch.device, rows: int = 8, blocks: int = 64, windowed: bool = False):
        self.device = device
        self.windowed = windowed  # the rows hold sequences' sliding-window tables (kv_cache/sliding_window.py)
        self.table = torch.zeros(rows, blocks, dtype=torch.long, device=device)
        self._held: list[list[int]] = [[] for _ in range(rows)]  # what each device row holds

    def update(self, seqs: list[Sequence]) -> None:
        """Brings the rows of these sequences' slots up to date with their tables."""
        rows, cols, values = [], [], []
        for seq in seqs:
            slot, table = seq.slot, seq.window_table if self.windowed else seq.block_table
            self._fit(slot + 1, len(table))
            held = self._held[slot]
            if len(held) == len(table) and held == table:
                continue
            start = _first_difference(held, table)
            rows.extend([slot] * (len(table) - start))
            cols.extend(range(start, len(table)))
            values.extend(table[start:])
            self._held[slot] = list(table)
        if values:
            index = to_device([rows, cols], torch.long, self.device)
            self.table.index_put_((index[0], index[1]), to_device(values, torch.long, self.device))

    def rows(self, slots: torch.Tensor, blocks: int) -> torch.Tensor:
        """[len(slots), blocks]: each slot's first `blocks` entries (past a table's end: stale
        entries, which the caller masks by context length)."""
        self._fit(self.table.shape[0], blocks)
        return self.table[:, :blocks].index_select(0, slots)

    def _fit(self, rows: int, blocks: int) -> None:
        old_rows, old_blocks = self.table.shape
        if rows <= old_rows and blocks <= old_blocks:
            return
        new_rows = old_rows if rows <= old_rows else max(rows, 2 * old_rows)
        new_blocks = old_blocks if blocks <= old_blocks else max(blocks, 2 * old_blocks)
        wider = torch.zeros(new_rows, new_blocks, dtype=torch.long, device=self.device)
        wider[:old_rows, :old_blocks] = self.table
        self.table = wider
        self._held.extend([] for _ in range(wider.shape[0] - old_rows))
