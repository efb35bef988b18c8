"""KVCacheCoordinator: reference counts, chained prefix hashes, LRU reuse of freed cached blocks."""

from __future__ import annotations

from inference.engine.kv_cache.coordinator import KVCacheCoordinator
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sequence import Sequence


def computed_seq(manager: KVCacheCoordinator, request_id: str, tokens: list[int], **params) -> Sequence:
    """A sequence whose prompt has been fully computed into its blocks."""
    seq = Sequence(request_id, tokens, SamplingParams(**params))
    manager.reuse_cached_prefix(seq)
    manager.grow(seq, seq.num_uncomputed_tokens)
    seq.num_computed_tokens = len(seq)
    manager.register_computed_blocks(seq)
    return seq


def test_grow_allocates_ceil_blocks_and_free_returns_them():
    manager = KVCacheCoordinator(num_blocks=10, block_size=4)
    seq = Sequence("a", list(range(9)), SamplingParams())
    manager.grow(seq, 9)
    assert len(seq.block_table) == 3 and manager.num_free_blocks == 7
    seq.num_computed_tokens = 9
    manager.grow(seq, 3)  # 12 tokens still fit in 3 blocks
    assert len(seq.block_table) == 3
    manager.grow(seq, 4)
    assert len(seq.block_table) == 4
    manager.free(seq)
    assert manager.num_free_blocks == 10 and seq.block_table == []


def test_shared_prefix_blocks_are_reference_counted():
    manager = KVCacheCoordinator(num_blocks=10, block_size=4)
    first = computed_seq(manager, "a", list(range(10)))  # 2 full blocks + 1 partial
    second = Sequence("b", list(range(8)) + [99, 98, 97], SamplingParams())
    manager.reuse_cached_prefix(second)
    assert second.block_table == first.block_table[:2]
    assert second.num_computed_tokens == 8
    assert [manager.blocks[b].ref_count for b in first.block_table[:2]] == [2, 2]
    manager.free(first)
    assert [manager.blocks[b].ref_count for b in second.block_table] == [1, 1]
    assert manager.num_free_blocks == 10 - 2


def test_hash_is_chained_so_equal_blocks_after_different_prefixes_do_not_match():
    manager = KVCacheCoordinator(num_blocks=10, block_size=2)
    computed_seq(manager, "a", [1, 2, 3, 4, 5])
    other = Sequence("b", [9, 9, 3, 4, 5], SamplingParams())  # block [3, 4] follows a different prefix
    manager.reuse_cached_prefix(other)
    assert other.block_table == [] and manager.prefix_hits == 0


def test_a_cache_salt_shares_blocks_only_with_the_same_salt():
    """vLLM's cache_salt: the chain of block hashes starts from the salt."""
    manager = KVCacheCoordinator(num_blocks=16, block_size=2)
    tokens = [1, 2, 3, 4, 5]
    computed_seq(manager, "plain", tokens)
    computed_seq(manager, "salted", tokens, cache_salt="tenant-a")
    for salt, hits in ((None, 2), ("tenant-a", 2), ("tenant-b", 0)):
        again = Sequence(f"again-{salt}", tokens, SamplingParams(cache_salt=salt))
        manager.reuse_cached_prefix(again)
        assert again.num_computed_tokens == 2 * hits, salt
        manager.free(again)


def test_at_least_one_prompt_token_is_left_to_compute():
    manager = KVCacheCoordinator(num_blocks=10, block_size=4)
    computed_seq(manager, "a", list(range(8)))
    again = Sequence("b", list(range(8)), SamplingParams())
    manager.reuse_cached_prefix(again)
    assert again.num_computed_tokens == 4  # the second block is recomputed to get the last logits


def test_freed_cached_blocks_are_reused_until_evicted_least_recent_first():
    manager = KVCacheCoordinator(num_blocks=4, block_size=2, enable_prefix_caching=True)
    old = computed_seq(manager, "old", [1, 2, 3])
    new = computed_seq(manager, "new", [7, 8, 9])
    manager.free(old)
    manager.free(new)
    assert manager.num_free_blocks == 4
    filler = Sequence("filler", [5] * 6, SamplingParams())
    manager.grow(filler, 6)  # 3 blocks: 2 never-hashed + 1 evicted: the older cached block goes first
    old_again = Sequence("old2", [1, 2, 3], SamplingParams())
    manager.reuse_cached_prefix(old_again)
    new_again = Sequence("new2", [7, 8, 9], SamplingParams())
    manager.reuse_cached_prefix(new_again)
    assert old_again.num_computed_tokens == 0
    assert new_again.num_computed_tokens == 2


def test_prefix_caching_off_never_shares():
    manager = KVCacheCoordinator(num_blocks=10, block_size=4, enable_prefix_caching=False)
    computed_seq(manager, "a", list(range(10)))
    b = Sequence("b", list(range(10)), SamplingParams())
    manager.reuse_cached_prefix(b)
    assert b.block_table == [] and manager.prefix_queries == 0


def test_a_fork_shares_full_blocks_and_copies_only_a_partial_one():
    blocks = KVCacheCoordinator(num_blocks=3, block_size=4)
    aligned = Sequence("a", list(range(8)), SamplingParams(max_tokens=4, n=2))
    blocks.grow(aligned, 8)
    aligned.num_computed_tokens = 8
    blocks.grow(Sequence("other", [1], SamplingParams(max_tokens=1)), 1)  # the last free block goes
    assert blocks.num_free_blocks == 0 and blocks.can_fork(aligned)  # nothing to copy: no block needed
    child = Sequence("a", list(range(8)), SamplingParams(max_tokens=4))
    assert blocks.fork(aligned, child) == []
    assert child.block_table == aligned.block_table and all(blocks.blocks[b].ref_count == 2 for b in child.block_table)
    partial = Sequence("p", list(range(7)), SamplingParams(max_tokens=4, n=2))
    partial.block_table, partial.num_computed_tokens = aligned.block_table[:], 7
    assert not blocks.can_fork(partial)  # its last block is partial: a copy needs a free block
