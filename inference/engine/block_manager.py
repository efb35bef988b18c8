"""The BlockManager: which KV blocks each sequence holds. Bookkeeping only (no torch); the pool
itself is planned and allocated in kv_pool.py.

Blocks are reference-counted so two sequences with the same prompt prefix share them.
A full block is named by a hash chained over every token up to its end, so equal hashes
mean equal prefixes. A freed block keeps its hash and stays findable until it is reused
(least recently freed first), which is what makes a repeated system prompt free.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from .sequence import Sequence


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()  # kept for cached blocks so a hash collision can't return wrong K/V


def chain_hash(previous: int | None, token_ids: tuple[int, ...]) -> int:
    return hash((previous, token_ids))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_uncached: deque[int] = deque(range(num_blocks))
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # LRU order: oldest first
        self.hash_to_block: dict[int, int] = {}
        self.prefix_queries = 0  # full prompt blocks looked up
        self.prefix_hits = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_uncached) + len(self.free_cached)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives `seq` enough blocks to hold `num_new_tokens` more computed tokens."""
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self._take_free_block())

    def truncate(self, seq: Sequence) -> None:
        """After a verification: frees the blocks past the sequence's computed tokens and the slot
        of the token it sampled last, the blocks that held only rejected guesses (never full of
        verified tokens, so never named: the prefix cache cannot find them)."""
        keep = -(-(seq.num_computed_tokens + 1) // self.block_size)
        while len(seq.block_table) > keep:
            block = self.blocks[seq.block_table.pop()]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_uncached.append(block.block_id)

    def reuse_cached_prefix(self, seq: Sequence) -> None:
        """Attaches cached blocks matching the start of a fresh sequence's tokens.

        At least one token is always left to compute: the step needs its logits. A sequence that
        wants its prompt's logprobs computes every prompt token (cached blocks hold no logits).
        """
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching or seq.prompt_logprobs is not None or seq.params.pooling == "mean":
            return  # (a mean pools every prompt position's hidden state: none may come from the cache)
        full_blocks = (len(seq.token_ids) - 1) // self.block_size
        previous = None
        for index in range(full_blocks):
            tokens = self._block_tokens(seq, index)
            block_hash = chain_hash(previous, tokens)
            self.prefix_queries += 1
            block_id = self.hash_to_block.get(block_hash)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            self.prefix_hits += 1
            self._acquire(block_id)
            seq.block_table.append(block_id)
            seq.block_hashes.append(block_hash)
            previous = block_hash
        seq.num_computed_tokens = len(seq.block_table) * self.block_size
        seq.num_prefix_hit_tokens = seq.num_computed_tokens

    def can_fork(self, parent: Sequence) -> bool:
        """A fork needs one free block when the prompt ends in a partial block (its own copy), else none."""
        partial = parent.num_computed_tokens % self.block_size != 0
        return not partial or self.num_free_blocks >= 1

    def fork(self, parent: Sequence, child: Sequence) -> tuple[int, int] | None:
        """`child` shares `parent`'s computed full blocks (one more reference each) and gets its own
        copy of a partial last block, which both would write next (copy on write, done at once).
        Returns (source, destination) blocks to copy the K/V of, or None when every block is full."""
        full = parent.num_computed_tokens // self.block_size
        for block_id in parent.block_table[:full]:
            self._acquire(block_id)
            child.block_table.append(block_id)
        child.block_hashes = list(parent.block_hashes[:full])
        child.num_computed_tokens = parent.num_computed_tokens
        if full == len(parent.block_table):
            return None
        copy = self._take_free_block()
        child.block_table.append(copy)
        return parent.block_table[full], copy

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
            block = self.blocks[seq.block_table[index]]
            if block.hash is None and block_hash not in self.hash_to_block:
                block.hash, block.token_ids = block_hash, tokens
                self.hash_to_block[block_hash] = block.block_id

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):  # tail blocks first: they are the least likely to be shared
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is not None:
                    self.free_cached[block_id] = None
                else:
                    self.free_uncached.append(block_id)
        seq.block_table = []
        seq.block_hashes = []

    def _block_tokens(self, seq: Sequence, index: int) -> tuple[int, ...]:
        return tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])

    def _acquire(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.free_cached.pop(block_id, None)
        block.ref_count += 1

    def _take_free_block(self) -> int:
        if self.free_uncached:
            block_id = self.free_uncached.popleft()
        elif self.free_cached:
            block_id, _ = self.free_cached.popitem(last=False)  # evict the least recently freed
            evicted = self.blocks[block_id]
            if self.hash_to_block.get(evicted.hash) == block_id:
                del self.hash_to_block[evicted.hash]
            evicted.hash, evicted.token_ids = None, ()
        else:
            raise RuntimeError("no free KV blocks")  # the scheduler checks can_grow first
        self.blocks[block_id].ref_count = 1
        return block_id
