"""The full-attention layers' blocks: every position a sequence has computed, in `seq.block_table`.

Blocks are reference-counted so two sequences with the same prompt prefix share them. A full block
is named by a hash chained over every token up to its end, so equal hashes mean equal prefixes. A
freed block keeps its hash and stays findable until it is reused (least recently freed first),
which is what makes a repeated system prompt free. Its chain of names is also what the other
kinds of cache (sliding-window blocks, recurrent-state checkpoints) name their own entries by.
"""

from __future__ import annotations

from ..sequence import Sequence
from .block_pool import FULL, BlockCopy, BlockPool, chain_hash, chain_root


class FullAttentionBlocks:
    kind = FULL

    def __init__(self, num_blocks: int, block_size: int):
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.pool.num_free

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self.pool.take())

    def truncate(self, seq: Sequence) -> None:
        """Frees the blocks past the computed tokens and the next token's slot: those that held only
        rejected guesses (never full of verified tokens, so never named)."""
        keep = -(-(seq.num_computed_tokens + 1) // self.block_size)
        while len(seq.block_table) > keep:
            self.pool.release(seq.block_table.pop())

    def cached_prefix(self, seq: Sequence) -> tuple[list[int], list[int], list[tuple[int, ...]]]:
        """The cached blocks matching the start of the sequence's tokens (always leaving one token to
        compute: the step needs its logits): their ids, chained hashes and tokens."""
        hits, hashes, tokens = [], [], []
        previous = chain_root(seq.params.cache_salt)
        for index in range((len(seq.token_ids) - 1) // self.block_size):
            block_tokens = self.block_tokens(seq, index)
            block_hash = chain_hash(previous, block_tokens)
            block_id = self.pool.lookup(block_hash, block_tokens)
            if block_id is None:
                break
            hits.append(block_id)
            hashes.append(block_hash)
            tokens.append(block_tokens)
            previous = block_hash
        return hits, hashes, tokens

    def attach(self, seq: Sequence, hits: list[int], hashes: list[int]) -> None:
        for block_id in hits:
            self.pool.acquire(block_id)
        seq.block_table, seq.block_hashes = list(hits), list(hashes)

    def can_fork(self, parent: Sequence) -> bool:
        """A fork needs one free block when the prompt ends in a partial block (its own copy), else none."""
        return parent.num_computed_tokens % self.block_size == 0 or self.pool.num_free >= 1

    def fork(self, parent: Sequence, child: Sequence) -> BlockCopy | None:
        """`child` shares `parent`'s computed full blocks and gets its own copy of a partial last
        block, which both would write next (copy on write, done at once)."""
        full = parent.num_computed_tokens // self.block_size
        for block_id in parent.block_table[:full]:
            self.pool.acquire(block_id)
            child.block_table.append(block_id)
        child.block_hashes = list(parent.block_hashes[:full])
        if full == len(parent.block_table):
            return None
        copy = self.pool.take()
        child.block_table.append(copy)
        return BlockCopy(parent.block_table[full], copy, FULL)

    def name_full_blocks(self, seq: Sequence) -> None:
        """Names each block that just became full, extending the sequence's chain of hashes."""
        full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        while len(seq.block_hashes) < full:
            index = len(seq.block_hashes)
            tokens = self.block_tokens(seq, index)
            previous = seq.block_hashes[-1] if seq.block_hashes else chain_root(seq.params.cache_salt)
            block_hash = chain_hash(previous, tokens)
            seq.block_hashes.append(block_hash)
            self.pool.name(seq.block_table[index], block_hash, tokens)

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):  # tail blocks first: they are the least likely to be shared
            self.pool.release(block_id)
        seq.block_table = []
        seq.block_hashes = []

    def block_tokens(self, seq: Sequence, index: int) -> tuple[int, ...]:
        return tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])
