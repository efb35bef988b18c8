"""Verification of guessed tokens: each verifying sequence's k+1 rows' sampling contexts, and what
the step writes once they are sampled (LLMEngine.step calls both).

Sampling each row and comparing it with the guess is standard speculative sampling for a
deterministic proposer: with a guess drawn from a point mass q, rejection sampling accepts it with
probability p(guess) and otherwise samples from p with the guess removed, which is the same law as
drawing from p and keeping the guess when the draw equals it. Drawing is what plain decoding does,
so the sequence writes the very tokens it would have written without guesses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..outputs import RequestOutput
from ..sample.sampler import SamplerOutput, SamplingContext, rewind_generator

if TYPE_CHECKING:
    from ..kv_cache.coordinator import KVCacheCoordinator
    from ..output_processor import OutputProcessor
    from ..sample.structured import Grammars
    from ..sequence import Sequence
    from .proposer import Speculator

# a row's context: (sequence, its allowed tokens, the guesses before the row) -> SamplingContext
ContextFor = Callable[["Sequence", object, list[int]], SamplingContext]


def verify_contexts(seq: Sequence, masks: dict, grammars: Grammars | None, context: ContextFor) -> list[SamplingContext]:
    """A verifying sequence's k+1 rows' contexts: each row sampled as the next token would be,
    its context taking the guesses before it as written (its penalties, its grammar's mask,
    min_tokens)."""
    draft = seq.draft
    row_masks = guess_masks(seq, masks, grammars) if seq.active_matcher is not None else [None] * (len(draft) + 1)
    return [context(seq, row_masks[i], draft[:i]) for i in range(len(draft) + 1)]


def guess_masks(seq: Sequence, masks: dict, grammars: Grammars) -> list:
    """A constrained sequence's mask for each verification row: the grammar after each guess
    (proposed only where the grammar accepts it), walked forward and back.

    The walk ends at a guess that completes the grammar: the sequence finishes on that token, so
    no later row is used, and llguidance takes tokens past its stop without recording them (a
    rollback counting them would also undo guesses' predecessors: the end of a forced tool call
    followed by a guessed end of turn lost its last real token)."""
    matcher, draft = seq.matcher, seq.draft
    rows = [masks.get(id(seq))]
    consumed = 0
    for token_id in draft:
        if not matcher.consume_token(token_id):
            break  # (proposed guesses were validated: not reached) its row cannot accept it anyway
        consumed += 1
        if matcher.is_stopped():
            break
        rows.append(grammars.allowed([matcher])[0])
    if consumed and not matcher.rollback(consumed):
        raise RuntimeError("the grammar matcher could not go back over the guesses")
    return rows + [None] * (len(draft) + 1 - len(rows))  # rows past a refused guess are never used


class Verifier:
    """Writes what a verification step decided: the accepted guesses and one more token each."""

    def __init__(self, processor: OutputProcessor, speculator: Speculator, kv_cache: KVCacheCoordinator):
        self.processor, self.speculator, self.kv_cache = processor, speculator, kv_cache

    def verify(self, sampled: SamplerOutput, seqs: list[Sequence], saved: dict, vocab: int, now: float) -> list[RequestOutput]:
        """Guesses are accepted while they equal what their row sampled; the first row that
        differs (or the row after the last guess) gives one more token. The reply is therefore
        exactly the tokens sampling alone would have written: greedy token for token, sampled in
        distribution, and with a seed the same tokens, since the generator is put back where the
        written tokens alone would have left it (sampler.rewind_generator; `saved`: each seeded
        sequence's generator state before the step)."""
        outputs, row = [], 0
        for seq in seqs:
            draft, rows = seq.draft, len(seq.draft) + 1
            tokens, logprobs = sampled.token_ids[row : row + rows], sampled.logprobs[row : row + rows]
            row += rows
            if seq.is_finished:  # aborted while the step ran
                continue
            accepted = accepted_count(draft, tokens)
            if id(seq) in saved and accepted < len(draft):
                rewind_generator(seq.generator, saved[id(seq)], accepted + 1, vocab, seq.params)
            seq.num_computed_tokens += 1 + accepted  # the verified tokens' K/V; the rejected slots are dropped
            written = []
            for token_id, logprob in zip(tokens[: accepted + 1], logprobs):
                written.append(self.processor.append_token(seq, token_id, logprob, now))
                if seq.is_finished:
                    break
            self.speculator.record(seq, accepted, len(written))
            # the last output carries the counts with this verification in them
            written[-1] = dataclasses.replace(written[-1], **spec_counts(seq))
            self.processor.generated.add(now, len(written))
            if not seq.is_finished:
                self.kv_cache.truncate(seq)
                self.kv_cache.register_computed_blocks(seq)
            outputs.append(merged_output(written))
        return outputs


def spec_counts(seq: Sequence) -> dict:
    """A completion's speculation counts so far, as RequestOutput reports them."""
    spec = seq.spec
    if spec is None:
        return {}
    return {
        "spec_draft_tokens": spec.proposed,
        "spec_accepted_tokens": spec.accepted,
        "prediction_draft_tokens": spec.prediction_proposed,
        "prediction_accepted_tokens": spec.prediction_accepted,
    }


def accepted_count(draft: list[int], sampled: list[int]) -> int:
    """How many guesses, from the first, equal what their rows sampled."""
    accepted = 0
    while accepted < len(draft) and sampled[accepted] == draft[accepted]:
        accepted += 1
    return accepted


def merged_output(outputs: list[RequestOutput]) -> RequestOutput:
    """One output for the tokens a verification wrote, as if each had come from its own step."""
    if len(outputs) == 1:
        return outputs[0]
    logprobs = [lp for out in outputs for lp in (out.logprobs or [])]
    return dataclasses.replace(
        outputs[-1],
        text="".join(out.text for out in outputs),
        token_ids=[t for out in outputs for t in out.token_ids],
        logprobs=logprobs or None,
        prompt_logprobs=outputs[0].prompt_logprobs,
    )
