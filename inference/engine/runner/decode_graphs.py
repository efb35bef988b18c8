"""Decode-only steps with static shapes and, on CUDA, one CUDA graph per batch size.

A decode step of a small model on a GPU launches about a thousand kernels whose work takes less
time than their launches; replaying a captured graph launches them all at once. A graph fixes
every shape and address, so a decode-only step is padded to the next of a few batch sizes
(`batch_buckets`) and runs on persistent input buffers: token ids, positions, cache slots and
context lengths (one upload), and block tables copied from the runner's device tables. Padding
rows write their K/V into a block reserved for them (the runner's last, never handed out) and
attend to one key; their results are dropped.

The Triton decode attention reads blocks in place through a table of fixed width, so one graph
serves every context length. The gathered path's width follows the longest context (rounded up
to a power of two of blocks): it runs the same padded step eagerly, which is how the CPU tests
check that padding changes no token. A step with prefill chunks runs its decodes so too, and
its chunks eagerly after them.
"""

from __future__ import annotations

import logging

import torch

from ..layers.attention import AttentionMetadata
from ..layers.attention.decode_triton import TritonDecode
from .transfers import to_device

log = logging.getLogger(__name__)


def batch_buckets(max_rows: int) -> list[int]:
    """1, 2, 4, then every multiple of 8 up to `max_rows` (rounded up), as vLLM captures."""
    top = max(1, -(-max_rows // 8) * 8)
    return sorted({size for size in (1, 2, 4) if size <= top} | set(range(8, top + 1, 8)))


class StaticDecode:
    def __init__(self, runner, max_rows: int, max_blocks: int):
        self.runner = runner
        self.buckets = batch_buckets(max_rows)
        self.max_blocks = max_blocks
        self.paged = runner.decode_attention is TritonDecode  # a fixed table width serves every context
        rows = self.buckets[-1]
        device = runner.device
        # token ids, positions, cache slots, context lengths: one upload per step
        self.ints = torch.zeros(4, rows, dtype=torch.long, device=device)
        self.tables = torch.zeros(rows, max_blocks, dtype=torch.long, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.steps = 0  # decode steps this path ran (tests, gpu_check)

    def fits(self, rows: int, longest: int) -> bool:
        return rows <= self.buckets[-1] and longest <= self.max_blocks * self.runner.block_size

    def forward(self, input_ids: list[int], positions: list[int], slots: list[int], table_rows: list[int], lengths: list[int]):
        """The decode rows' hidden states [rows, hidden], computed at the next bucket's size."""
        count = len(input_ids)
        size = next(b for b in self.buckets if b >= count)
        pad = size - count
        values = [
            input_ids + [0] * pad,
            positions + [0] * pad,
            slots + [self.runner.padding_slot] * pad,
            lengths + [1] * pad,
        ]
        self.ints[:, :size].copy_(to_device(values, torch.long, self.runner.device), non_blocking=True)
        width = self.max_blocks if self.paged else self._width(max(lengths))
        rows = to_device(table_rows + [table_rows[0]] * pad, torch.long, self.runner.device)
        self.tables[:size, :width] = self.runner.block_tables.rows(rows, width)  # padding rows read one real key
        self.steps += 1
        if size in self.graphs:
            graph, hidden = self.graphs[size]
            graph.replay()
            return hidden[:count]
        return self._body(size, width)[:count]

    def _width(self, longest: int) -> int:
        blocks = -(-longest // self.runner.block_size)
        return min(self.max_blocks, 1 << (blocks - 1).bit_length())

    def _body(self, size: int, width: int) -> torch.Tensor:
        runner = self.runner
        ids, positions, slots, lengths = self.ints[:, :size]
        decode = runner.decode_attention.build(
            runner.decode_kernels,
            self.tables[:size, :width],
            lengths,
            block_size=runner.block_size,
            head_block_offsets=runner.head_block_offsets,
        )
        meta = AttentionMetadata(
            write_rows=(runner.head_slot_offsets + slots).reshape(-1), num_decodes=size, decode=decode, prefills=[]
        )
        return runner.forward(ids, positions, runner.kv_caches, meta)

    @torch.inference_mode()
    def capture(self) -> None:
        """One graph per bucket, largest first, all in one memory pool, over padding inputs (every
        row writes to the reserved block). Each is run twice first on a side stream, so that
        lazy set-up (cuBLAS workspaces, Triton's compilation) happens outside the capture."""
        if not self.paged:
            log.warning("CUDA graphs need the Triton decode attention (a fixed table width); decode runs eagerly")
            return
        self.ints.zero_()
        self.ints[2].fill_(self.runner.padding_slot)
        self.ints[3].fill_(1)
        self.tables.zero_()
        pool = None
        for size in reversed(self.buckets):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._body(size, self.max_blocks)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                hidden = self._body(size, self.max_blocks)
            pool = graph.pool()
            self.graphs[size] = (graph, hidden)
        torch.cuda.synchronize()
        log.info("captured %d CUDA graphs for decode batches of %s", len(self.graphs), self.buckets)
