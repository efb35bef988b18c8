"""The recurrent layers' state slots (kv_cache/recurrent_state.py), kept by the KVCacheCoordinator
beside the full-attention blocks: a slot per running sequence, a copy for a fork, and prefix
checkpoints at a prompt's last block boundary that a later prompt resumes from."""

from __future__ import annotations

from inference.engine.kv_cache.block_pool import STATE, BlockCopy
from inference.engine.kv_cache.coordinator import KVCacheCoordinator
from inference.engine.kv_cache.recurrent_state import RecurrentStateSlots
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sequence import Sequence

BS, SLOTS = 4, 3


def manager(checkpoints: int = 2, every: int = 512) -> KVCacheCoordinator:
    return KVCacheCoordinator(64, BS, enable_prefix_caching=True, state=RecurrentStateSlots(SLOTS, BS, checkpoints, every))


def step(cache: KVCacheCoordinator, seq: Sequence, n: int) -> None:
    assert cache.can_grow(seq, n)
    cache.grow(seq, n)
    seq.num_computed_tokens += n
    cache.register_computed_blocks(seq)


def test_a_running_sequence_holds_one_slot_whatever_its_length_and_gives_it_back():
    cache = manager()
    seq = Sequence("a", list(range(30)), SamplingParams())
    step(cache, seq, 10)
    slot = list(seq.state_table)
    for _ in range(20):
        step(cache, seq, 1)
    assert seq.state_table == slot and cache.state.num_free == SLOTS - 1
    cache.free(seq)
    assert seq.state_table == [] and cache.state.num_free == SLOTS


def test_slots_run_out_with_the_batch_slots():
    cache = manager()
    seqs = [Sequence(str(i), [i] * 5, SamplingParams()) for i in range(SLOTS + 1)]
    for seq in seqs[:SLOTS]:
        step(cache, seq, 5)
    assert not cache.can_grow(seqs[SLOTS], 5)


def test_a_fork_gets_its_own_slot_with_a_copy_of_the_parents_state():
    cache = manager()
    parent, child = Sequence("p", list(range(6)), SamplingParams()), Sequence("p", list(range(6)), SamplingParams())
    step(cache, parent, 6)
    copies = cache.fork(parent, child)
    assert BlockCopy(parent.state_table[0], child.state_table[0], STATE) in copies
    assert child.state_table != parent.state_table


def test_a_prompt_keeps_a_checkpoint_at_its_last_block_boundary_that_the_same_prefix_resumes_from():
    cache = manager()
    first = Sequence("a", list(range(14)), SamplingParams())  # last block boundary before its last token: 12
    step(cache, first, 10)
    assert first.state_checkpoints == []  # this chunk does not reach 12
    cache.grow(first, 4)
    [(position, row)] = first.state_checkpoints
    assert position == 12 and row >= SLOTS  # checkpoint rows follow the running slots
    first.num_computed_tokens += 4
    cache.register_computed_blocks(first)
    assert first.state_checkpoints == []  # named: findable
    cache.free(first)
    again = Sequence("b", list(range(14)) + [99, 98], SamplingParams())
    cache.reuse_cached_prefix(again)
    assert again.num_computed_tokens == 12 and again.num_prefix_hit_tokens == 12
    assert cache.take_copies() == [BlockCopy(row, again.state_table[0], STATE)]
    other = Sequence("c", [7] * 14, SamplingParams())
    cache.reuse_cached_prefix(other)
    assert other.num_computed_tokens == 0 and cache.take_copies() == []


def test_a_prefix_with_cached_blocks_but_no_checkpoint_is_computed_whole():
    """The blocks alone cannot resume a recurrent state: without checkpoint rows nothing is reused."""
    cache = manager(checkpoints=0)
    first = Sequence("a", list(range(14)), SamplingParams())
    step(cache, first, 14)
    cache.free(first)
    again = Sequence("b", list(range(14)), SamplingParams())
    cache.reuse_cached_prefix(again)
    assert again.num_computed_tokens == 0 and again.state_table == [] and again.block_table == []


def test_a_checkpoint_reserved_by_a_sequence_that_goes_is_given_back():
    cache = manager(checkpoints=1)
    seq = Sequence("a", list(range(9)), SamplingParams())
    cache.grow(seq, 9)
    assert seq.state_checkpoints and cache.state.checkpoints.num_free == 0
    cache.free(seq)
    assert seq.state_checkpoints == [] and cache.state.checkpoints.num_free == 1


def test_a_verification_replays_only_its_accepted_rows_and_a_freed_sequence_none():
    from inference.engine.kv_cache.recurrent_state import StateReplay

    cache = manager()
    seq = Sequence("a", list(range(6)), SamplingParams())
    step(cache, seq, 6)
    cache.grow(seq, 5)  # the token after the prompt and 4 guesses
    cache.begin_verification(seq)
    seq.num_computed_tokens += 1 + 2  # two guesses accepted
    cache.truncate(seq)
    assert cache.take_replays() == [StateReplay(seq.state_table[0], 3)] and cache.take_replays() == []
    cache.begin_verification(seq)
    seq.num_computed_tokens += 1
    cache.truncate(seq)
    cache.free(seq)  # preempted before the next step: nothing to replay onto a slot it no longer holds
    assert cache.take_replays() == []


def test_a_long_prompt_keeps_checkpoints_along_the_way_that_a_shared_prefix_resumes_from():
    """Two requests behind the same long system prompt: the second resumes from the last checkpoint
    the first kept inside what they share, not only from the first's end."""
    cache = manager(checkpoints=8, every=8)
    system = list(range(100, 121))  # 21 shared tokens: checkpoints at 8 and 16 inside them
    first = Sequence("a", system + [1, 2, 3, 4, 5], SamplingParams())  # its last boundary: 24
    step(cache, first, 10)
    step(cache, first, 16)
    assert first.state_checkpoints == []  # 8, 16 and 24 named
    cache.free(first)
    second = Sequence("b", system + [9, 9, 9, 9, 9, 9], SamplingParams())
    cache.reuse_cached_prefix(second)
    assert second.num_computed_tokens == 16 and len(cache.take_copies()) == 1


def test_a_long_prompt_keeps_a_few_checkpoints_not_one_per_stretch_and_its_last_first():
    cache = manager(checkpoints=3, every=8)
    seq = Sequence("a", list(range(101)), SamplingParams())  # boundaries kept: 8, 16, 32, 64 and the last, 100
    cache.grow(seq, 101)
    assert [position for position, _ in seq.state_checkpoints] == [8, 16, 100]  # 3 rows: the last one first
    other = manager(checkpoints=8, every=8)
    seq = Sequence("b", list(range(101)), SamplingParams())
    other.grow(seq, 101)
    assert [position for position, _ in seq.state_checkpoints] == [8, 16, 32, 64, 100]
