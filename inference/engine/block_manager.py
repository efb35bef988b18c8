"""The BlockManager: which KV blocks each sequence holds. Bookkeeping only (no torch); the pool
itself is planned and allocated in kv_pool.py.

Blocks are reference-counted so two sequences with the same prompt prefix share them.
A full block is named by a hash chained over every token up to its end, so equal hashes
mean equal prefixes. A freed block keeps its hash and stays findable until it is reused
(least recently freed first), which is what makes a repeated system prompt free.

A model with sliding-window layers keeps their K/V apart (window_blocks.py): every call here
grows, forks, trims and frees a sequence's window blocks with its full-attention ones.
"""

from __future__ import annotations

from .block_pool import BlockCopy, BlockPool, chain_hash
from .sequence import Sequence
from .window_blocks import WindowBlocks


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, window: WindowBlocks | None = None):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self.blocks = self.pool.blocks
        self.window = window
        self.prefix_queries = 0  # full prompt blocks looked up
        self.prefix_hits = 0

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        if self.window is not None and self.window.blocks_needed(seq, num_new_tokens) > self.window.pool.num_free:
            return False
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives `seq` enough blocks to hold `num_new_tokens` more computed tokens."""
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self.pool.take())
        if self.window is not None:
            self.window.grow(seq, num_new_tokens)

    def truncate(self, seq: Sequence) -> None:
        """After a verification: frees the blocks past the sequence's computed tokens and the slot
        of the token it sampled last, the blocks that held only rejected guesses (never full of
        verified tokens, so never named: the prefix cache cannot find them)."""
        keep = -(-(seq.num_computed_tokens + 1) // self.block_size)
        while len(seq.block_table) > keep:
            self.pool.release(seq.block_table.pop())
        if self.window is not None:
            self.window.truncate(seq)

    def reuse_cached_prefix(self, seq: Sequence) -> None:
        """Attaches cached blocks matching the start of a fresh sequence's tokens.

        At least one token is always left to compute: the step needs its logits. A sequence that
        wants its prompt's logprobs computes every prompt token (cached blocks hold no logits).
        With sliding-window layers, only as far as their window's blocks are cached too.
        """
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching or seq.prompt_logprobs is not None or seq.params.pooling in ("mean", "cls"):
            return  # (a mean pools every prompt position's hidden state: none may come from the cache)
        hits, hashes, tokens = [], [], []
        previous = None
        for index in range((len(seq.token_ids) - 1) // self.block_size):
            block_tokens = self._block_tokens(seq, index)
            block_hash = chain_hash(previous, block_tokens)
            self.prefix_queries += 1
            block_id = self.pool.lookup(block_hash, block_tokens)
            if block_id is None:
                break
            hits.append(block_id)
            hashes.append(block_hash)
            tokens.append(block_tokens)
            previous = block_hash
        if self.window is not None:
            usable = self.window.usable_prefix(hashes, tokens)
            hits, hashes, tokens = hits[:usable], hashes[:usable], tokens[:usable]
            self.window.attach(seq, hashes, tokens)
        for block_id in hits:
            self.pool.acquire(block_id)
        self.prefix_hits += len(hits)
        seq.block_table, seq.block_hashes = hits, hashes
        seq.num_computed_tokens = len(hits) * self.block_size
        seq.num_prefix_hit_tokens = seq.num_computed_tokens

    def can_fork(self, parent: Sequence) -> bool:
        """A fork needs one free block when the prompt ends in a partial block (its own copy), else none."""
        partial = parent.num_computed_tokens % self.block_size != 0
        if self.window is not None and not self.window.can_fork(parent):
            return False
        return not partial or self.num_free_blocks >= 1

    def fork(self, parent: Sequence, child: Sequence) -> list[BlockCopy]:
        """`child` shares `parent`'s computed full blocks (one more reference each) and gets its own
        copy of a partial last block, which both would write next (copy on write, done at once).
        Returns the block copies to make: none when every block is full."""
        full = parent.num_computed_tokens // self.block_size
        for block_id in parent.block_table[:full]:
            self.pool.acquire(block_id)
            child.block_table.append(block_id)
        child.block_hashes = list(parent.block_hashes[:full])
        child.num_computed_tokens = parent.num_computed_tokens
        copies = []
        if full < len(parent.block_table):
            copy = self.pool.take()
            child.block_table.append(copy)
            copies.append(BlockCopy(parent.block_table[full], copy))
        if self.window is not None and (window_copy := self.window.fork(parent, child)) is not None:
            copies.append(BlockCopy(*window_copy, window=True))
        return copies

    def register_computed_blocks(self, seq: Sequence) -> None:
        """After a step, names each block that just became full so later requests can reuse it."""
        if not self.enable_prefix_caching:
            return
        full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        while len(seq.block_hashes) < full:
            index = len(seq.block_hashes)
            tokens = self._block_tokens(seq, index)
            previous = seq.block_hashes[-1] if seq.block_hashes else None
            block_hash = chain_hash(previous, tokens)
            seq.block_hashes.append(block_hash)
            self.pool.name(seq.block_table[index], block_hash, tokens)
        if self.window is not None:
            self.window.name_full_blocks(seq, seq.block_hashes, lambda index: self._block_tokens(seq, index))

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):  # tail blocks first: they are the least likely to be shared
            self.pool.release(block_id)
        seq.block_table = []
        seq.block_hashes = []
        if self.window is not None:
            self.window.free(seq)

    def _block_tokens(self, seq: Sequence, index: int) -> tuple[int, ...]:
        return tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])
