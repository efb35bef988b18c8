"""A request's state inside the engine: its tokens, progress through the cache, and its blocks."""

from __future__ import annotations

import enum
import time

from .sample.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams):
        self.request_id = request_id
        self.params = params
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0  # tokens whose K/V are in the cache
        self.num_prefix_hit_tokens = 0  # of those, how many the prefix cache supplied (this admission)
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # hashes of this sequence's full, computed blocks
        self.window_table: list[int] = []  # its sliding-window layers' blocks (kv_cache/sliding_window.py)
        self.window_named = 0  # how many of those have been named for the prefix cache
        self.state_table: list[int] = []  # its recurrent layers' state slot (kv_cache/recurrent_state.py)
        self.state_checkpoints: list[tuple[int, int]] = []  # (position, state row) where its state is to be kept
        self.state_verified_from: int | None = None  # a verification's first position, until its rows are replayed
        self.slot: int | None = None  # batch slot index while running
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None  # the stop string or stop token id that ended it
        self.index = 0  # which of the request's n completions this is
        self.forks_left = params.n - 1  # completions still to fork from this one once its prompt is computed
        self.reported_cached_tokens = 0  # what usage reports as cached: the prefix-cache hits of its first admission
        # the prompt's tokens' logprobs by position (the first has none), filled as prefill computes them
        self.prompt_logprobs: list | None = [None] * len(prompt_token_ids) if params.prompt_logprobs is not None else None
        self.arrival_time = time.monotonic()
        self.scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finished_time: float | None = None
        # set by the engine: per-request sampler RNG, incremental detokenizer, grammar matcher
        self.generator = None
        self.detokenizer = None
        self.matcher = None  # llguidance's, when params.structured asks for constrained decoding
        self.pool_sum = None  # an embedding request's running sum of hidden states (mean pooling)
        # a ToolTrigger, while tools under tool_choice "auto" may open a call (engine/sample/tool_trigger.py)
        self.tool_trigger = None
        self.reasoning = None  # a ReasoningState, when the reply starts in reasoning (engine/sample/reasoning.py)
        self.spec = None  # its speculative decoding state: lookup index, this step's guesses, counts (spec_decode/proposer.py)

    @property
    def draft(self) -> list[int]:
        """The tokens guessed to follow it this step ([] when it does not speculate)."""
        return self.spec.draft if self.spec is not None else []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def active_matcher(self):
        """The grammar matcher, once the reasoning (if any) has ended: grammars constrain the answer only."""
        return None if self.reasoning is not None and self.reasoning.active else self.matcher

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def num_slots(self) -> int:
        """The batch slots it holds or has reserved: its own and its completions still to fork."""
        return 1 + self.forks_left

    def reset_for_recompute(self) -> None:
        """Preemption drops the cache; the sequence's tokens so far become its new prompt to prefill."""
        self.num_computed_tokens = 0
        self.num_prefix_hit_tokens = 0
        self.block_table = []
        self.block_hashes = []
        self.window_table = []
        self.window_named = 0
        self.state_table = []
        self.state_checkpoints = []
        self.state_verified_from = None
        self.status = SequenceStatus.WAITING
        self.slot = None
        self.pool_sum = None  # mean pooling sums the prompt again as it is recomputed
        if self.spec is not None:
            self.spec.draft = []
        # (prompt logprobs are kept by position: recomputing them writes the same values again)
