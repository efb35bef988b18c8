"""The recurrent layers' state slots: a hybrid model's per-sequence memory that does not grow.

A Gated DeltaNet layer (layers/gated_deltanet.py) keeps, per sequence, its convolution's last
inputs and a fixed-size recurrent matrix: one slot per running sequence holds them for every such
layer (the tensors: kv_cache/tensors.py). The slot is taken when the sequence first runs and given
back when it finishes or is preempted (a preempted sequence recomputes its state from its tokens,
as its K/V). A fork gets a slot of its own with a copy of its parent's state: both go on from the
same prompt. There is a running slot per batch slot, so a running sequence never waits for one.

Prefix caching: a state cannot be cut back to an earlier position, so a cached prefix resumes only
where a copy of the state was kept, a checkpoint. A prompt leaves them as its prefill passes its
last block boundary and CHECKPOINT_EVERY tokens, then twice, four times as many (512, 1024, 2048,
...: a long prompt keeps a few, not one per stretch, so it does not flush every other conversation's;
the layer saves the state there as its chunk passes), each named by the chained hash of the block that ends there, as llama.cpp's context
checkpoints and vLLM's hybrid prefix caching keep them. A later prompt with that prefix takes a
running slot holding a copy of the last one it shares (`take_copies`: made before the step's
forward) and computes from there: an agent's next turn from the end of its last prompt, another
request behind the same long system prompt from the checkpoint within it.
Checkpoints live in rows of their own after the running slots, kept as blocks are (block_pool.py):
a freed one stays findable until it is reused, least recently used first.

Speculation: a state cannot be cut back past rejected guesses either, so a verification's rows
read the slot's state without writing it (layers/gated_deltanet.py keeps their inputs), and once
the verifier knows how many were accepted, the next step replays just those rows onto the slot
first (`take_replays`): the state is then exactly what decoding them one by one would have left.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from ..sequence import Sequence
from .block_pool import STATE, BlockCopy, BlockPool


class StateReplay(NamedTuple):
    """A verification's first `rows` rows, replayed onto `slot` before the next step's forward."""

    slot: int
    rows: int


CHECKPOINT_EVERY = 512  # a prefill's first checkpoint; then at twice, four times ... as far (and its last boundary)


def checkpoint_rows(num_slots: int, enable_prefix_caching: bool) -> int:
    """How many checkpoint rows the state pool keeps beside its running slots (the memory plan's too)."""
    return num_slots if enable_prefix_caching else 0


class RecurrentStateSlots:
    kind = STATE

    def __init__(self, num_slots: int, block_size: int = 16, num_checkpoints: int = 0, every: int | None = None):
        """`num_slots` running slots (rows 0..num_slots-1 of the state tensors), then
        `num_checkpoints` checkpoint rows (0: no prefix caching)."""
        self.num_slots = num_slots
        self.block_size = block_size
        every = every or CHECKPOINT_EVERY
        self.every = max(block_size, every // block_size * block_size)  # a prefill's checkpoints' spacing
        self.free_slots: deque[int] = deque(range(num_slots))
        self.checkpoints = BlockPool(num_checkpoints)
        self.pending: list[BlockCopy] = []  # checkpoint -> running slot copies the next step makes first
        self.replays: list[StateReplay] = []  # verified rows the next step replays first

    @property
    def num_rows(self) -> int:
        """Rows of the state tensors: running slots, then checkpoints."""
        return self.num_slots + self.checkpoints.num_blocks

    @property
    def num_free(self) -> int:
        return len(self.free_slots)

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return bool(seq.state_table) or bool(self.free_slots)

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """A running slot on first run; and a checkpoint row at each checkpoint position this step's
        tokens pass (`_checkpoint_positions`; the layer saves the state there), the prompt's last
        block boundary first where rows run short."""
        if not seq.state_table:
            seq.state_table.append(self.free_slots.popleft())
        positions = self._checkpoint_positions(seq, num_new_tokens)
        last = (seq.num_prompt_tokens - 1) // self.block_size * self.block_size
        kept = []
        for position in sorted(positions, key=lambda p: p != last):  # the last boundary first
            if not self.checkpoints.num_free:
                break
            kept.append((position, self.num_slots + self.checkpoints.take()))
        seq.state_checkpoints.extend(sorted(kept))

    def _checkpoint_positions(self, seq: Sequence, num_new_tokens: int) -> list[int]:
        """The block boundaries this step's tokens pass where the prompt keeps its state: `every`
        tokens, twice, four times as far ..., and the last boundary before its last token."""
        if not self.checkpoints.num_blocks:
            return []
        last = (seq.num_prompt_tokens - 1) // self.block_size * self.block_size
        start, end = seq.num_computed_tokens, min(seq.num_computed_tokens + num_new_tokens, last)
        positions, position = [], self.every
        while position <= end:
            if position > start:
                positions.append(position)
            position *= 2
        if start < last <= start + num_new_tokens and last not in positions:
            positions.append(last)
        return positions

    def begin_verification(self, seq: Sequence) -> None:
        """This step verifies guesses after the sequence's computed tokens: its state stays there."""
        seq.state_verified_from = seq.num_computed_tokens

    def truncate(self, seq: Sequence) -> None:
        """After a verification (its computed tokens now count the accepted ones): those rows are
        replayed onto the state before the next step."""
        if seq.state_verified_from is not None:
            self.replays.append(StateReplay(seq.state_table[0], seq.num_computed_tokens - seq.state_verified_from))
            seq.state_verified_from = None

    def usable_prefix(self, hashes: list[int], tokens: list[tuple[int, ...]]) -> int:
        """The most cached blocks after which a checkpoint of the state is kept."""
        for count in range(len(hashes), 0, -1):
            if self.checkpoints.lookup(hashes[count - 1], tokens[count - 1]) is not None:
                return count
        return 0

    def attach(self, seq: Sequence, hashes: list[int], tokens: list[tuple[int, ...]]) -> None:
        """A running slot for the resumed sequence, filled from the checkpoint at the prefix's end."""
        if not hashes:
            return
        row = self.checkpoints.lookup(hashes[-1], tokens[-1])
        self.checkpoints.acquire(row)  # (and released: now the most recently used)
        self.checkpoints.release(row)
        seq.state_table = [self.free_slots.popleft()]
        self.pending.append(BlockCopy(self.num_slots + row, seq.state_table[0], STATE))

    def name_full_blocks(self, seq: Sequence, hashes: list[int], tokens_of) -> None:
        """Names the sequence's checkpoints once the blocks ending at them are named (then computed)."""
        while seq.state_checkpoints and seq.state_checkpoints[0][0] <= len(hashes) * self.block_size:
            position, row = seq.state_checkpoints.pop(0)
            index = position // self.block_size - 1
            self.checkpoints.name(row - self.num_slots, hashes[index], tokens_of(index))
            self.checkpoints.release(row - self.num_slots)

    def can_fork(self, parent: Sequence) -> bool:
        return bool(self.free_slots)

    def fork(self, parent: Sequence, child: Sequence) -> BlockCopy:
        """The child's own slot, holding a copy of the parent's state."""
        slot = self.free_slots.popleft()
        child.state_table = [slot]
        return BlockCopy(parent.state_table[0], slot, STATE)

    def take_copies(self) -> list[BlockCopy]:
        copies, self.pending = self.pending, []
        return copies

    def take_replays(self) -> list[StateReplay]:
        replays, self.replays = self.replays, []
        return replays

    def free(self, seq: Sequence) -> None:
        for slot in seq.state_table:
            self.free_slots.append(slot)
            self.pending = [copy for copy in self.pending if copy.destination != slot]
            self.replays = [replay for replay in self.replays if replay.slot != slot]
        seq.state_table = []
        seq.state_verified_from = None
        for _, row in seq.state_checkpoints:  # reserved, never reached: back unnamed
            self.checkpoints.release(row - self.num_slots)
        seq.state_checkpoints = []
