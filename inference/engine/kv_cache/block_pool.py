"""One pool's blocks: reference counts, the free lists and the names (chained prefix hashes) that
let a freed block be found again. The full-attention pool (full_attention.py) and the
sliding-window layers' own pool (sliding_window.py) keep their blocks the same way."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()  # kept for cached blocks so a hash collision can't return wrong K/V


def chain_hash(previous: int | None, token_ids: tuple[int, ...]) -> int:
    return hash((previous, token_ids))


def chain_root(cache_salt: str | None) -> int | None:
    """What a sequence's chain of block hashes starts from: nothing, or its cache salt (vLLM's
    `cache_salt`), so cached blocks are shared only among requests with the same salt: tenants
    kept apart, or a request computed from scratch whatever ran before it."""
    return None if cache_salt is None else hash(("cache_salt", cache_salt))


class BlockPool:
    """A freed block keeps its name and stays findable until it is reused: blocks never named are
    handed out first, then named ones, least recently freed first."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_uncached: deque[int] = deque(range(num_blocks))
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # LRU order: oldest first
        self.hash_to_block: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self.free_uncached) + len(self.free_cached)

    def lookup(self, block_hash: int, tokens: tuple[int, ...]) -> int | None:
        """The block named `block_hash` holding exactly `tokens`, if one is cached."""
        block_id = self.hash_to_block.get(block_hash)
        if block_id is None or self.blocks[block_id].token_ids != tokens:
            return None
        return block_id

    def name(self, block_id: int, block_hash: int, tokens: tuple[int, ...]) -> None:
        """Names a full block, unless it has a name or another block has this one."""
        block = self.blocks[block_id]
        if block.hash is None and block_hash not in self.hash_to_block:
            block.hash, block.token_ids = block_hash, tokens
            self.hash_to_block[block_hash] = block_id

    def acquire(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.free_cached.pop(block_id, None)
        block.ref_count += 1

    def release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            if block.hash is not None:
                self.free_cached[block_id] = None
            else:
                self.free_uncached.append(block_id)

    def take(self) -> int:
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


FULL, WINDOW, STATE = "full", "window", "state"  # the kinds of cache (coordinator.py)


class BlockCopy(NamedTuple):
    """A block's K/V copied into another of the same pool (a fork's own copy of a partial block),
    or a recurrent state into another slot (a fork's own state)."""

    source: int
    destination: int
    kind: str = FULL  # which kind of cache's pool: FULL, WINDOW, STATE
