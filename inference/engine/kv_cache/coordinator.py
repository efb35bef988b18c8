"""The KV cache coordinator: what the scheduler, the verifier and the engine ask of a sequence's
memory, answered by one manager per kind of cache. Bookkeeping only (no torch): the tensors are
allocated in tensors.py, their size planned in memory_plan.py.

Every model has full-attention blocks (full_attention.py), whose chain of prefix hashes names
everything a prefix cache can find. A model with sliding-window layers adds their own pool
(sliding_window.py); a hybrid model's recurrent layers, a state slot per sequence
(recurrent_state.py). Each manager grows, forks, trims and frees its part of a sequence with the
others; a sequence holds one table per kind (`seq.block_table`, `seq.window_table`,
`seq.state_table`). A cached prefix is resumed only as far as every kind can resume it.
"""

from __future__ import annotations

from ..sequence import Sequence
from .block_pool import STATE, BlockCopy
from .full_attention import FullAttentionBlocks
from .layout import layer_kinds, model_window, window_pool_blocks
from .recurrent_state import RecurrentStateSlots, checkpoint_rows
from .sliding_window import SlidingWindowBlocks


class KVCacheCoordinator:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        window: SlidingWindowBlocks | None = None,
        state: RecurrentStateSlots | None = None,
    ):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.full = FullAttentionBlocks(num_blocks, block_size)
        self.pool = self.full.pool
        self.blocks = self.pool.blocks
        self.window = window
        self.state = state
        # the kinds beside full attention, each resumed, grown, forked and freed with it
        self.others = [manager for manager in (window, state) if manager is not None]
        self.prefix_queries = 0  # full prompt blocks looked up
        self.prefix_hits = 0

    @classmethod
    def for_model(cls, model, num_blocks: int, config, num_slots: int, max_model_len: int) -> KVCacheCoordinator:
        """The managers `model` needs: full-attention blocks, a sliding-window pool sized by the
        batch where the model has sliding-window layers, a state slot per batch slot where it has
        recurrent ones."""
        window_blocks = window_pool_blocks(model, config.block_size, num_slots, config.max_num_batched_tokens, max_model_len)
        window = SlidingWindowBlocks(window_blocks, config.block_size, model_window(model)) if window_blocks else None
        state = None
        if STATE in layer_kinds(model):
            checkpoints = checkpoint_rows(num_slots, config.enable_prefix_caching)
            state = RecurrentStateSlots(num_slots, config.block_size, checkpoints)
        return cls(num_blocks, config.block_size, config.enable_prefix_caching, window, state)

    @property
    def num_state_slots(self) -> int:
        """Rows of the recurrent-state tensors: running slots and prefix checkpoints."""
        return self.state.num_rows if self.state is not None else 0

    @property
    def num_window_blocks(self) -> int:
        return self.window.pool.num_blocks if self.window is not None else 0

    @property
    def managers(self) -> list:
        return [self.full, *self.others]

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return all(manager.can_grow(seq, num_new_tokens) for manager in self.managers)

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives `seq` room for `num_new_tokens` more computed tokens in every kind of cache."""
        for manager in self.managers:
            manager.grow(seq, num_new_tokens)

    def truncate(self, seq: Sequence) -> None:
        """After a verification: gives back what held only rejected guesses, in every kind."""
        for manager in self.managers:
            manager.truncate(seq)

    def reuse_cached_prefix(self, seq: Sequence) -> None:
        """Attaches cached entries matching the start of a fresh sequence's tokens, as far as every
        kind of cache can resume from. A sequence that wants its prompt's logprobs, or pools every
        position (mean, CLS), computes every prompt token: cached blocks hold no logits or states."""
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching or seq.prompt_logprobs is not None or seq.params.pooling in ("mean", "cls"):
            return
        hits, hashes, tokens = self.full.cached_prefix(seq)
        self.prefix_queries += min(len(hits) + 1, (len(seq.token_ids) - 1) // self.block_size)
        for manager in self.others:
            usable = manager.usable_prefix(hashes, tokens)
            hits, hashes, tokens = hits[:usable], hashes[:usable], tokens[:usable]
        for manager in self.others:
            manager.attach(seq, hashes, tokens)
        self.full.attach(seq, hits, hashes)
        self.prefix_hits += len(hits)
        seq.num_computed_tokens = len(hits) * self.block_size
        seq.num_prefix_hit_tokens = seq.num_computed_tokens

    def can_fork(self, parent: Sequence) -> bool:
        return all(manager.can_fork(parent) for manager in self.managers)

    def fork(self, parent: Sequence, child: Sequence) -> list[BlockCopy]:
        """`child` shares `parent`'s computed entries, with its own copy of whatever both would
        write next. Returns the copies the runner must make."""
        child.num_computed_tokens = parent.num_computed_tokens
        return [copy for manager in self.managers if (copy := manager.fork(parent, child)) is not None]

    def register_computed_blocks(self, seq: Sequence) -> None:
        """After a step, names each block that just became full so later requests can reuse it."""
        if not self.enable_prefix_caching:
            return
        self.full.name_full_blocks(seq)
        for manager in self.others:
            manager.name_full_blocks(seq, seq.block_hashes, lambda index: self.full.block_tokens(seq, index))

    def begin_verification(self, seq: Sequence) -> None:
        """`seq` verifies guesses this step (it has grown by them): recurrent states stay put."""
        if self.state is not None:
            self.state.begin_verification(seq)

    def take_copies(self) -> list[BlockCopy]:
        """What the next step copies before its forward: resumed prefixes' states into their slots."""
        return self.state.take_copies() if self.state is not None else []

    def take_replays(self) -> list:
        """What the next step replays before its forward: verified rows onto recurrent states."""
        return self.state.take_replays() if self.state is not None else []

    def free(self, seq: Sequence) -> None:
        for manager in self.managers:
            manager.free(seq)
