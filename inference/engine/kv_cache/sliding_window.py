"""The sliding-window layers' blocks: a sequence holds only the blocks its window still reaches.

A sliding-window layer (five of Gemma 3's six; every layer of Mistral v0.1 or of a windowed
Phi-3) reads only the last `window` keys before a query, so its K/V from before a sequence's
window is never read again. These layers keep their K/V in a pool of their own, sized by the
batch (each slot's window, and one step's tokens) rather than by the contexts, as llama.cpp's SWA
cache and vLLM's sliding-window manager are: a block that falls behind its sequence's window goes
back to the pool at once, and its entry in the sequence's `window_table` then names the pool's
null block (one past the last), which attention reads only under the window's mask.

Prefix caching: a full block is named with the chained hash of the full-attention block at the
same position, and a freed one stays findable until it is reused. A cached prefix can be resumed
at a block boundary only where every block the window reaches from there is still cached
(`usable_prefix`): a follow-up turn that extends a recent conversation resumes where it ended; a
prompt that shares only an old, evicted stretch is recomputed from where its window's blocks are.
"""

from __future__ import annotations

from ..sequence import Sequence
from .block_pool import WINDOW, BlockCopy, BlockPool


class SlidingWindowBlocks:
    kind = WINDOW

    def __init__(self, num_blocks: int, block_size: int, window: int):
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.window = window
        self.null_block = num_blocks  # the runner's pool has one block more: read masked, never written

    @staticmethod
    def pool_size(slots: int, window: int, block_size: int, step_tokens: int, max_model_len: int) -> int:
        """Blocks enough that no sequence ever waits for this pool: a running sequence holds at most
        the blocks from its window's first to its step's last, so every slot's window plus the
        step's tokens (each slot's window capped at a whole context)."""
        per_seq = min(-(-window // block_size) + 2, -(-max_model_len // block_size) + 1)
        return slots * per_seq + -(-step_tokens // block_size)

    def first_reached(self, position: int) -> int:
        """The first block that the window of a query at `position` reaches."""
        return max(0, position - self.window + 1) // self.block_size

    def _behind(self, seq: Sequence) -> list[int]:
        """Indices of the blocks the sequence still holds that its next query's window no longer reaches."""
        table, behind = seq.window_table, []
        index = min(self.first_reached(seq.num_computed_tokens), len(table)) - 1
        while index >= 0 and table[index] != self.null_block:
            behind.append(index)
            index -= 1
        return behind

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks taken from the pool to grow by `num_new_tokens`, less those given back first."""
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.window_table)) - len(self._behind(seq))

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives back the blocks behind the window, then takes those the step's tokens need."""
        for index in self._behind(seq):
            self.pool.release(seq.window_table[index])
            seq.window_table[index] = self.null_block
        total = seq.num_computed_tokens + num_new_tokens
        while len(seq.window_table) < -(-total // self.block_size):
            seq.window_table.append(self.pool.take())

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.pool.num_free

    def truncate(self, seq: Sequence) -> None:
        """As FullAttentionBlocks.truncate: the blocks past the computed tokens and the next one go back."""
        keep = -(-(seq.num_computed_tokens + 1) // self.block_size)
        while len(seq.window_table) > keep:
            self._release(seq.window_table.pop())

    def free(self, seq: Sequence) -> None:
        """Front to back, unlike the full-attention blocks: the tail is what a follow-up turn
        resumes from, so it is the last of them to be evicted."""
        for block_id in seq.window_table:
            self._release(block_id)
        seq.window_table = []
        seq.window_named = 0

    def usable_prefix(self, hashes: list[int], tokens: list[tuple[int, ...]]) -> int:
        """Of a prefix of full-attention blocks found cached (their hashes and tokens), how many
        blocks can be resumed from: the most whose window's blocks are all cached here too."""
        run = 0  # cached blocks in a row, ending at the current one
        runs = []
        for block_hash, block_tokens in zip(hashes, tokens):
            run = run + 1 if self.pool.lookup(block_hash, block_tokens) is not None else 0
            runs.append(run)
        for count in range(len(hashes), 0, -1):
            if count - self.first_reached(count * self.block_size) <= runs[count - 1]:
                return count
        return 0

    def attach(self, seq: Sequence, hashes: list[int], tokens: list[tuple[int, ...]]) -> None:
        """Takes the cached blocks the window reaches from the end of this usable prefix."""
        first = self.first_reached(len(hashes) * self.block_size)
        seq.window_table = [self.null_block] * first
        for block_hash, block_tokens in zip(hashes[first:], tokens[first:]):
            block_id = self.pool.lookup(block_hash, block_tokens)
            self.pool.acquire(block_id)
            seq.window_table.append(block_id)
        seq.window_named = len(hashes)

    def name_full_blocks(self, seq: Sequence, hashes: list[int], tokens_of) -> None:
        """Names each window block that became full (`hashes`: the sequence's full blocks' chain)."""
        for index in range(seq.window_named, min(len(hashes), len(seq.window_table))):
            if seq.window_table[index] != self.null_block:
                self.pool.name(seq.window_table[index], hashes[index], tokens_of(index))
        seq.window_named = max(seq.window_named, min(len(hashes), len(seq.window_table)))

    def can_fork(self, parent: Sequence) -> bool:
        return parent.num_computed_tokens % self.block_size == 0 or self.pool.num_free >= 1

    def fork(self, parent: Sequence, child: Sequence) -> BlockCopy | None:
        """As FullAttentionBlocks.fork: shared full blocks, a copy of a partial last one."""
        full = parent.num_computed_tokens // self.block_size
        for block_id in parent.window_table[:full]:
            if block_id != self.null_block:
                self.pool.acquire(block_id)
            child.window_table.append(block_id)
        child.window_named = min(parent.window_named, full)
        if full == len(parent.window_table):
            return None
        copy = self.pool.take()
        child.window_table.append(copy)
        return BlockCopy(parent.window_table[full], copy, WINDOW)

    def _release(self, block_id: int) -> None:
        if block_id != self.null_block:
            self.pool.release(block_id)
