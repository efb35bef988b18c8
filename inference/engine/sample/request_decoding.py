"""What a request's sequence decodes with, made once as it is queued: its grammar matcher, reasoning
state, seeded generator, speculation state, incremental detokenizer and tool-call trigger; and each
step, a row's sampling context (its allowed tokens among it). A part of LLMEngine (a mixin): it
reads the engine's tokenizer, grammars, speculator and bundle."""

from __future__ import annotations

from ..detokenizer import IncrementalDetokenizer, hidden_special_ids
from ..sequence import Sequence
from .reasoning import ReasoningState
from .sampler import SamplingContext, make_generator
from .sampling_params import SamplingParams
from .structured import Grammars, PendingMasks, one_token_mask


class RequestDecoding:
    @property
    def grammars(self) -> Grammars:
        """The tokenizer as the grammar library sees it (~1 s to build): made on first use, by whichever
        thread asks first (the web side compiles a request's grammar before queueing it)."""
        with self._grammars_lock:
            if self._grammars is None:
                self._grammars = Grammars(self.tokenizer, self.bundle.model.vocab_size, self.bundle.eos_token_ids)
            return self._grammars

    def _sequence(self, request_id: str, token_ids: list[int], params: SamplingParams, index: int) -> Sequence:
        seq = Sequence(request_id, token_ids, params)
        seq.index = index
        if params.structured is not None:
            seq.matcher = self.grammars.matcher(params.structured)
        if params.reasoning is not None:
            encode = self._marker_ids
            start = params.reasoning.get("start") if not params.reasoning.get("opened", True) else None
            seq.reasoning = ReasoningState(
                encode(params.reasoning["end"]), params.reasoning.get("budget"), encode(start) if start else None
            )
        seq.generator = make_generator(params.seed, self.bundle.device)
        self.speculator.attach(seq, params.prediction)
        if self._hidden_ids is None:  # once per engine: the tokenizer's special tokens but its parsed marks
            self._hidden_ids = hidden_special_ids(self.tokenizer)
        seq.detokenizer = IncrementalDetokenizer(
            self.tokenizer,
            token_ids,
            stop=params.stop,
            include_stop_str=params.include_stop_str_in_output,
            hidden_ids=self._hidden_ids,
        )
        if params.tool_trigger is not None and params.structured is None:
            seq.tool_trigger = self._tool_trigger(seq, params.tool_trigger)
        return seq

    def _marker_ids(self, marker: str) -> list[int]:
        """A reasoning marker's token ids, tokenized once per marker."""
        if marker not in self._markers:
            self._markers[marker] = self.tokenizer.encode(marker, add_special_tokens=False)
        return self._markers[marker]

    def _collect_masks(self, pending: PendingMasks, seqs: list[Sequence]) -> dict:
        """{id(seq): allowed tokens} for the constrained sequences about to sample."""
        masks, times = pending.collect(seqs)
        self.grammar_mask_seconds += times.computing
        self.grammar_mask_wait_seconds += times.waited
        self.grammar_mask_rows += times.rows
        return masks

    def _context(self, seq: Sequence, allowed, guessed: list[int] = ()) -> SamplingContext:
        """A row's sampling context; `guessed`: the guesses before this row, taken as written."""
        return SamplingContext(
            params=seq.params,
            prompt_token_ids=seq.token_ids[: seq.num_prompt_tokens],
            output_token_ids=seq.output_token_ids + list(guessed),
            generator=seq.generator,
            eos_token_ids=self.bundle.eos_token_ids,
            allowed=allowed,
        )

    def _allowed(self, seq: Sequence, masks: dict):
        """The tokens the sequence may sample: its grammar's, or only the next token of its reasoning's
        end marker once its thinking budget is spent."""
        forced = seq.reasoning.forced_token if seq.reasoning is not None else None
        if forced is not None:
            return one_token_mask(self.bundle.model.vocab_size, forced)
        return masks.get(id(seq))
