"""The sliding-window layers' blocks (kv_cache/sliding_window.py), kept by the KVCacheCoordinator beside the
full-attention ones: a sequence holds only what its window reaches, blocks behind it go back at
once, and a cached prefix resumes only where the window's blocks are cached too."""

from __future__ import annotations

from inference.engine.kv_cache.block_pool import WINDOW as WINDOW_KIND
from inference.engine.kv_cache.block_pool import BlockCopy
from inference.engine.kv_cache.coordinator import KVCacheCoordinator
from inference.engine.kv_cache.sliding_window import SlidingWindowBlocks
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sequence import Sequence

BS, WINDOW = 4, 8


def manager(window_blocks: int = 64, full_blocks: int = 64) -> KVCacheCoordinator:
    return KVCacheCoordinator(full_blocks, BS, enable_prefix_caching=True, window=SlidingWindowBlocks(window_blocks, BS, WINDOW))


def step(blocks: KVCacheCoordinator, seq: Sequence, n: int) -> None:
    """What the engine does around one step of n tokens: grow, compute, name the full blocks."""
    assert blocks.can_grow(seq, n)
    blocks.grow(seq, n)
    seq.num_computed_tokens += n
    blocks.register_computed_blocks(seq)


def held(blocks: KVCacheCoordinator, seq: Sequence) -> list[int]:
    return [b for b in seq.window_table if b != blocks.window.null_block]


def test_a_long_sequence_holds_only_its_windows_blocks_and_gives_the_rest_back():
    blocks = manager()
    seq = Sequence("a", list(range(100)), SamplingParams())
    step(blocks, seq, 10)  # a prefill chunk
    for _ in range(90):  # then decode-sized steps
        step(blocks, seq, 1)
        # the next query at position c reads from c - WINDOW + 1: at most the window's blocks and one more
        assert len(held(blocks, seq)) <= WINDOW // BS + 2
        assert len(seq.window_table) == -(-seq.num_computed_tokens // BS)  # one entry per block, null behind
    assert len(seq.block_table) == 25  # the full-attention layers keep everything
    assert blocks.window.pool.num_free == 64 - len(held(blocks, seq))
    blocks.free(seq)
    assert blocks.window.pool.num_free == 64 and blocks.num_free_blocks == 64


def test_a_chunk_longer_than_the_window_holds_its_blocks_for_its_step_only():
    blocks = manager()
    seq = Sequence("a", list(range(40)), SamplingParams())
    step(blocks, seq, 40)
    assert len(held(blocks, seq)) == 10  # all of the chunk's: written in the step, read by its queries
    step(blocks, seq, 0)  # the next grow gives back what the next query's window does not reach
    assert len(held(blocks, seq)) == 2  # positions 32..39: the next query (40) reaches back to 33


def test_the_pool_size_covers_every_slot_and_a_steps_tokens():
    assert (
        SlidingWindowBlocks.pool_size(slots=32, window=512, block_size=16, step_tokens=512, max_model_len=32768) == 32 * 34 + 32
    )
    assert SlidingWindowBlocks.pool_size(slots=4, window=512, block_size=16, step_tokens=512, max_model_len=64) == 4 * 5 + 32


def test_a_follow_up_turn_resumes_from_the_cached_window():
    blocks = manager()
    first = Sequence("a", list(range(30)), SamplingParams())
    step(blocks, first, 30)
    for token in range(30, 37):  # its reply
        first.token_ids.append(token)
        step(blocks, first, 1)
    blocks.free(first)
    follow_up = Sequence("b", list(range(37)) + [99, 98, 97, 96, 95], SamplingParams())
    blocks.reuse_cached_prefix(follow_up)
    assert follow_up.num_computed_tokens == 36  # every full block of the shared 37 tokens
    first_reached = (36 - WINDOW + 1) // BS
    assert follow_up.window_table[:first_reached] == [blocks.window.null_block] * first_reached
    assert len(follow_up.window_table) == 9 and all(b != blocks.window.null_block for b in follow_up.window_table[first_reached:])


def test_a_prefix_whose_window_blocks_were_given_back_early_resumes_only_where_they_are_cached():
    blocks = manager(window_blocks=8)
    first = Sequence("a", list(range(64)), SamplingParams())
    for _ in range(16):  # block by block: each block behind the window goes back, named, and stays findable
        step(blocks, first, 4)
    blocks.free(first)
    hog = Sequence("hog", [7] * 24, SamplingParams())  # takes 6 of the 8 window blocks: the oldest named ones go
    step(blocks, hog, 24)
    again = Sequence("b", list(range(64)) + [1], SamplingParams())
    blocks.reuse_cached_prefix(again)
    # all 16 full-attention blocks are cached, but of the window's only the last two survive: the
    # resumable point is the one whose window (positions 57..63: blocks 14 and 15) they cover
    assert again.num_computed_tokens == 64 and again.window_table[14:] == [b for b in again.window_table if b != 8]
    blocks.free(again)
    hog2 = Sequence("hog2", [5] * 8, SamplingParams())
    step(blocks, hog2, 8)  # the last two go too
    third = Sequence("c", list(range(64)) + [1], SamplingParams())
    blocks.reuse_cached_prefix(third)
    assert third.num_computed_tokens == 0 and third.block_table == []  # nothing to resume from: recomputed


def test_a_fork_shares_full_window_blocks_and_copies_a_partial_one():
    blocks = manager()
    parent = Sequence("a", list(range(22)), SamplingParams(n=2))
    step(blocks, parent, 22)
    child = Sequence("a", list(range(22)), SamplingParams())
    copies = blocks.fork(parent, child)
    assert copies == [
        BlockCopy(parent.block_table[5], child.block_table[5]),
        BlockCopy(parent.window_table[5], child.window_table[5], WINDOW_KIND),
    ]
    assert child.window_table[:5] == parent.window_table[:5]  # null entries and shared blocks alike
    assert all(blocks.window.pool.blocks[b].ref_count == 2 for b in held(blocks, child)[:-1])


def test_rejected_guesses_window_blocks_go_back():
    blocks = manager()
    seq = Sequence("a", list(range(10)), SamplingParams())
    step(blocks, seq, 9)
    blocks.grow(seq, 9)  # a verification of 1 + 8 guesses
    seq.num_computed_tokens += 2  # one guess accepted
    blocks.truncate(seq)
    assert len(seq.window_table) == -(-(seq.num_computed_tokens + 1) // BS)
