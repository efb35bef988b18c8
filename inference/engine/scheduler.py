"""Continuous batching: which sequences run this step, and how many of their tokens.

Each step spends a token budget: running sequences first (a decode costs one token, an
unfinished prefill takes what is left of the budget, so long prompts are chunked and never
stall the decodes), then waiting requests are admitted into free slots. When the pool runs
out of blocks, the newest running sequence is preempted and later recomputed.

A decode with guessed tokens (spec_decode/proposer.py) is a verification: its token and its k guesses, k+1
rows, each run as a decode at its own position. Guesses are only ever a bonus: they take the budget
and blocks left once everything else is scheduled, never delaying or preempting anyone.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from .kv_cache.block_pool import BlockCopy
from .kv_cache.coordinator import KVCacheCoordinator
from .sequence import Sequence, SequenceStatus


def samples_after(seq: Sequence, n: int) -> bool:
    """Whether computing the sequence's next n tokens reaches its last known token, so that it
    samples in that step (every decode; only a prefill's final chunk). An embedding request never
    samples: its last chunk is pooled instead (`pools_after`)."""
    return seq.num_computed_tokens + n == len(seq) and seq.params.pooling is None


def pools_after(seq: Sequence, n: int) -> bool:
    """Whether an embedding request's prompt is complete after this step's n tokens."""
    return seq.params.pooling is not None and seq.num_computed_tokens + n == len(seq)


@dataclass
class ScheduledBatch:
    decodes: list[Sequence] = field(default_factory=list)  # one token each
    verifies: list[Sequence] = field(default_factory=list)  # a decode and its guesses (seq.draft): 1 + k tokens
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens this step)
    preempted: list[Sequence] = field(default_factory=list)
    copies: list[BlockCopy] = field(default_factory=list)  # made before the forward (resumed recurrent states)
    replays: list = field(default_factory=list)  # verified rows replayed onto recurrent states, before the forward

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.verifies and not self.prefills

    @property
    def num_verify_rows(self) -> int:
        return sum(1 + len(seq.draft) for seq in self.verifies)

    @property
    def sampling(self) -> list[Sequence]:
        """The sequences that sample this step: every decode, and each prefill whose chunk reaches
        its last known token (the runner's rule, known before the forward pass)."""
        return (
            [seq for seq in self.decodes if seq.params.pooling is None]
            + [seq for seq, n in self.prefills if samples_after(seq, n)]
            + self.verifies
        )


class Scheduler:
    def __init__(self, kv_cache: KVCacheCoordinator, max_num_seqs: int, max_num_batched_tokens: int):
        self.kv_cache = kv_cache
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last one is the first to preempt
        self.slots: list[Sequence | None] = [None] * max_num_seqs
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Frees the slot and blocks at once, so the very next step can admit someone else."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self._release(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
            self.kv_cache.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.finished_time = time.monotonic()

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        for seq in list(self.running):
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            wanted = min(seq.num_uncomputed_tokens, budget)
            if not self._make_room(seq, wanted, batch):
                continue  # seq itself was preempted
            self.kv_cache.grow(seq, wanted)
            budget -= wanted
            if seq.num_uncomputed_tokens == 1 and wanted == 1 and seq.num_computed_tokens > 0:
                batch.decodes.append(seq)
            else:
                batch.prefills.append((seq, wanted))

        while self.waiting and budget > 0 and not batch.preempted:
            seq = self.waiting[0]
            if self.slots_taken + seq.num_slots > self.max_num_seqs:
                break  # n completions need n slots: the request waits until they are free
            self.kv_cache.reuse_cached_prefix(seq)
            wanted = min(seq.num_uncomputed_tokens, budget)
            if not self.kv_cache.can_grow(seq, wanted):
                # Wait for running sequences to finish rather than evict them for a newcomer, and
                # hold no blocks while waiting: the cached ones stay findable for the next try.
                self.kv_cache.free(seq)
                seq.reset_for_recompute()
                break
            self.waiting.popleft()
            self.kv_cache.grow(seq, wanted)
            self._admit(seq)
            budget -= wanted
            batch.prefills.append((seq, wanted))
        self._add_guesses(batch, budget)
        if not batch.is_empty:  # (an empty step runs nothing: what is pending waits for one that does)
            batch.copies, batch.replays = self.kv_cache.take_copies(), self.kv_cache.take_replays()
        return batch

    def _add_guesses(self, batch: ScheduledBatch, budget: int) -> None:
        """Turns decodes with guesses into verifications with what the step has left once every
        decode, prefill chunk and admission has its share: the token budget and free blocks (the
        guesses' blocks come back at the end of the step, bar the next token's). A guess that does
        not fit is dropped; nobody waits or is preempted for one."""
        for seq in list(batch.decodes):
            draft = seq.draft[:budget]
            if draft and not self.kv_cache.can_grow(seq, 1 + len(draft)):
                draft = []
            if seq.spec is not None:
                seq.spec.draft = draft
            if draft:
                self.kv_cache.grow(seq, 1 + len(draft))
                self.kv_cache.begin_verification(seq)
                budget -= len(draft)
                batch.decodes.remove(seq)
                batch.verifies.append(seq)

    @property
    def slots_taken(self) -> int:
        """Slots held by running sequences plus those reserved for the completions they will fork."""
        return sum(seq.num_slots for seq in self.running)

    def fork(self, parent: Sequence, child: Sequence) -> list[BlockCopy] | None:
        """Runs `child` beside `parent` from the parent's computed prompt, in a slot the parent
        reserved. Returns the block copies (source, destination) the runner must make for it (its
        own copy of the prompt's partial last block, if any), or None when no block is free for
        that copy: the child then waits and prefills through the prefix cache."""
        if not self.kv_cache.can_fork(parent):
            self.add(child)
            return None
        copies = self.kv_cache.fork(parent, child)
        self._admit(child)
        return copies

    def _make_room(self, seq: Sequence, wanted: int, batch: ScheduledBatch) -> bool:
        """Preempts the newest running sequences until `seq` can grow; False if `seq` itself went."""
        while not self.kv_cache.can_grow(seq, wanted):
            victim = self.running[-1]
            self._preempt(victim)
            batch.preempted.append(victim)
            if victim is seq:
                return False
        return True

    def _admit(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.RUNNING
        seq.slot = self.slots.index(None)
        self.slots[seq.slot] = seq
        if seq.scheduled_time is None:
            seq.scheduled_time = time.monotonic()
            seq.reported_cached_tokens = seq.num_prefix_hit_tokens
        self.running.append(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._release(seq)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _release(self, seq: Sequence) -> None:
        self.kv_cache.free(seq)
        if seq.slot is not None:
            self.slots[seq.slot] = None
            seq.slot = None
