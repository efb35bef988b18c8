"""The recurrent layers' state slots: a hybrid model's per-sequence memory that does not grow.

A Gated DeltaNet layer (layers/gated_deltanet.py) keeps, per sequence, its convolution's last
inputs and a fixed-size recurrent matrix: one slot per running sequence holds them for every such
layer (the tensors: kv_cache/tensors.py). The slot is taken when the sequence first runs and given
back when it finishes or is preempted (a preempted sequence recomputes its state from its tokens,
as its K/V). A fork gets a slot of its own with a copy of its parent's state: both go on from the
same prompt. The pool has a slot per batch slot, so a running sequence never waits for one.

What this manager cannot do yet (the coordinator asks, and the others follow): resume a cached
prefix (no state is kept at block boundaries, so a hybrid model's prompt is always computed
whole), and roll a state back past guessed tokens (so such a model does not speculate).
"""

from __future__ import annotations

from collections import deque

from ..sequence import Sequence
from .block_pool import STATE, BlockCopy


class RecurrentStateSlots:
    kind = STATE
    resumes_prefixes = False  # no state checkpoints at block boundaries (yet)
    rolls_back = False  # no per-position states to return to after rejected guesses (yet)

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self.free_slots: deque[int] = deque(range(num_slots))

    @property
    def num_free(self) -> int:
        return len(self.free_slots)

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return bool(seq.state_table) or bool(self.free_slots)

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        if not seq.state_table:
            seq.state_table.append(self.free_slots.popleft())

    def truncate(self, seq: Sequence) -> None:
        """Nothing to give back: a state's size does not depend on the tokens it has seen."""

    def usable_prefix(self, hashes: list[int], tokens: list[tuple[int, ...]]) -> int:
        return 0

    def attach(self, seq: Sequence, hashes: list[int], tokens: list[tuple[int, ...]]) -> None:
        """Nothing cached to attach (usable_prefix is 0)."""

    def name_full_blocks(self, seq: Sequence, hashes: list[int], tokens_of) -> None:
        """Nothing named: no state is kept per block."""

    def can_fork(self, parent: Sequence) -> bool:
        return bool(self.free_slots)

    def fork(self, parent: Sequence, child: Sequence) -> BlockCopy:
        """The child's own slot, holding a copy of the parent's state."""
        slot = self.free_slots.popleft()
        child.state_table = [slot]
        return BlockCopy(parent.state_table[0], slot, STATE)

    def free(self, seq: Sequence) -> None:
        for slot in seq.state_table:
            self.free_slots.append(slot)
        seq.state_table = []
