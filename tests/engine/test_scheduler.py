"""Scheduler: token budget, chunked prefill, decode and prefill in one step, slots."""

from __future__ import annotations

from inference.engine.kv_cache.coordinator import KVCacheCoordinator
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence


def commit(batch):
    """What the engine does after a forward pass: the scheduled tokens are now in the cache."""
    for seq in batch.decodes:
        seq.num_computed_tokens += 1
    for seq, n in batch.prefills:
        seq.num_computed_tokens += n
    for seq in batch.decodes + [s for s, _ in batch.prefills]:
        if seq.num_computed_tokens == len(seq):
            seq.token_ids.append(0)  # the sampled token


def test_long_prompt_is_chunked_and_decodes_share_the_step():
    scheduler = Scheduler(KVCacheCoordinator(100, 4), max_num_seqs=4, max_num_batched_tokens=10)
    short = Sequence("short", [1, 2, 3], SamplingParams())
    scheduler.add(short)
    commit(scheduler.schedule())  # short prefilled, now decoding
    long = Sequence("long", list(range(25)), SamplingParams())
    scheduler.add(long)
    batch = scheduler.schedule()
    assert batch.decodes == [short]
    assert batch.prefills == [(long, 9)]  # what the budget leaves after one decode
    commit(batch)
    batch = scheduler.schedule()
    assert batch.decodes == [short] and batch.prefills == [(long, 9)]
    commit(batch)
    batch = scheduler.schedule()
    assert batch.decodes == [short] and batch.prefills == [(long, 7)]  # 8 tokens: the decode and the prompt's rest
    commit(batch)
    assert scheduler.schedule().decodes == [short, long]


def test_slots_are_capped_and_reused_lowest_first():
    scheduler = Scheduler(KVCacheCoordinator(100, 4), max_num_seqs=2, max_num_batched_tokens=100)
    seqs = [Sequence(f"s{i}", [1, 2], SamplingParams()) for i in range(3)]
    for seq in seqs:
        scheduler.add(seq)
    batch = scheduler.schedule()
    assert [s.request_id for s, _ in batch.prefills] == ["s0", "s1"]
    assert [s.slot for s in seqs[:2]] == [0, 1] and list(scheduler.waiting) == [seqs[2]]
    commit(batch)
    scheduler.finish(seqs[0], "stop")
    batch = scheduler.schedule()
    assert batch.decodes == [seqs[1]] and batch.prefills == [(seqs[2], 2)]
    assert seqs[2].slot == 0


def test_out_of_blocks_preempts_the_newest_running_sequence():
    blocks = KVCacheCoordinator(4, 2)
    scheduler = Scheduler(blocks, max_num_seqs=4, max_num_batched_tokens=100)
    old, new = Sequence("old", [1, 2, 3], SamplingParams()), Sequence("new", [4, 5, 6], SamplingParams())
    scheduler.add(old)
    scheduler.add(new)
    commit(scheduler.schedule())  # 2 blocks each: the pool is full
    commit(scheduler.schedule())  # 4 tokens each still fit
    batch = scheduler.schedule()  # "old" needs a 3rd block: "new" makes room
    assert batch.preempted == [new] and batch.decodes == [old]
    assert new.num_computed_tokens == 0 and new.block_table == [] and scheduler.waiting[0] is new
    assert scheduler.num_preemptions == 1


def test_abort_of_a_waiting_sequence():
    scheduler = Scheduler(KVCacheCoordinator(10, 4), max_num_seqs=1, max_num_batched_tokens=100)
    a, b = Sequence("a", [1], SamplingParams()), Sequence("b", [2], SamplingParams())
    scheduler.add(a)
    scheduler.add(b)
    scheduler.schedule()
    scheduler.finish(b, "abort")
    assert list(scheduler.waiting) == [] and b.finish_reason == "abort"
