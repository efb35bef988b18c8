"""The tool-call trigger's part of a step (sample/tool_trigger.py): a sequence's watch made at
queueing, a bare call's opening token drawn again under the call's grammar, and a tag seen after a
step handing its sequence that grammar. A part of LLMEngine (a mixin): it reads the engine's
grammars, sampler, tokenizer and sampling contexts."""

from __future__ import annotations

import logging

from ..sequence import Sequence
from .sampler import SamplerOutput
from .structured import GrammarError
from .tool_trigger import ToolTrigger

log = logging.getLogger("minivllm.engine")


class ToolCallSteps:
    def _tool_trigger(self, seq: Sequence, spec: dict) -> ToolTrigger | None:
        """The sequence's watch for a tool call opening (engine/sample/tool_trigger.py); None where its
        grammar does not compile: the reply then stays free rather than failing (the request path
        compiled it before, off this loop, and dropped it there already if it could not)."""
        try:
            self.grammars.compile(spec["grammar"])
            self.grammars.compile(spec.get("calls") or spec["grammar"])
        except GrammarError as exc:
            log.warning("request %s: tool-call grammar dropped, the reply stays free: %s", seq.request_id, exc)
            return None
        return ToolTrigger(spec, seq.detokenizer.token_text, lambda text: self.tokenizer.encode(text, add_special_tokens=False))

    def _states_at_start(self, seqs: list[Sequence]) -> dict[int, object]:
        """Row -> its seeded generator's state, for the rows whose next token is their answer's
        first (it may be drawn again: `_open_calls_at_start`)."""
        return {
            row: seq.generator.get_state()
            for row, seq in enumerate(seqs)
            if seq.tool_trigger is not None and seq.tool_trigger.at_start and seq.generator is not None
        }

    def _open_calls_at_start(self, seqs: list[Sequence], rows, sampled: SamplerOutput, states: dict[int, object]) -> None:
        """A plain row whose answer's first non-blank token opens a bare call (it starts with `{`)
        draws that token again from the same logits row, among the tokens starting with `{` that
        the call's grammar allows (the sequence keeps the grammar from now on): a first `{{` becomes
        `{`, `{"` and the like. Still a `{`, so a resumed request's replay opens the call where this
        one did (engine/resume.py).
        A seeded row draws again with the noise of its first draw (`states`): a token takes one
        draw whatever happened, so a resumed request skips exactly the draws its tokens took
        (engine/resume.py), and the masked draw is still a draw from the masked distribution."""
        for row, seq in enumerate(seqs):
            trigger = seq.tool_trigger
            if trigger is None or not trigger.at_start or _reasoning(seq) or not trigger.opens_bare(sampled.token_ids[row]):
                continue
            if not self._open_call(seq, trigger.tokens, "brace"):
                continue
            if row in states:
                seq.generator.set_state(states[row])
            allowed = _opening_braces(self.grammars.allowed([seq.matcher])[0], trigger.piece)
            again = self.sampler(rows[row : row + 1], [self._context(seq, allowed)])
            sampled.token_ids[row], sampled.logprobs[row] = again.token_ids[0], again.logprobs[0]

    def _open_call(self, seq: Sequence, written: list[int], how: str) -> bool:
        """Gives the sequence its call grammar's matcher, fed the tokens that opened the call (and
        for a `{` or a fence, the trigger a matcher of the calls alone); where the grammar refuses
        them the trigger is dropped and the reply stays free."""
        trigger = seq.tool_trigger
        matcher = self.grammars.matcher(trigger.grammar)
        if not all(matcher.consume_token(token_id) for token_id in written):
            trigger.drop()
            return False
        calls = None
        if how in ("brace", "fence"):  # may be JSON meant as the answer: the calls alone follow along
            calls = self.grammars.matcher(trigger.calls)
            if not all(calls.consume_token(token_id) for token_id in written):
                trigger.drop()
                return False
        trigger.opened(how, calls)
        seq.matcher = matcher
        return True

    def _watch_tool_calls(self, seqs: list[Sequence]) -> None:
        """After a step's tokens are written: a tag (or a fence, or a `{` not drawn again) that opens
        a call hands its sequence the call's grammar; JSON that turned out not to be a call gives
        it back (the reply goes on free), and a whole call written after a `{` or a fence is held
        to the calls alone from there."""
        for seq in seqs:
            trigger = seq.tool_trigger
            if trigger is None or not trigger.armed or seq.is_finished or _reasoning(seq):
                continue
            answer = seq.output_token_ids[seq.reasoning.tokens if seq.reasoning is not None else 0 :]
            opening = trigger.observe(answer)
            if trigger.settled == "other":  # JSON meant as the answer: free from here
                seq.matcher = None
            elif trigger.settled == "call":  # a whole call: the calls alone hold the rest
                seq.matcher, trigger.calls_matcher = trigger.calls_matcher, None
            trigger.settled = None
            if opening is not None:
                self._open_call(seq, opening, trigger.opened_by)


def _opening_braces(allowed, piece):
    """The grammar's mask (True: allowed) narrowed to the tokens whose text starts with `{` (after
    blanks); the mask itself where none does."""
    ids = allowed.nonzero().flatten().tolist()
    others = [token_id for token_id in ids if not piece(token_id).lstrip().startswith("{")]
    if len(others) == len(ids):
        return allowed
    narrowed = allowed.clone()
    narrowed[others] = False
    return narrowed


def _reasoning(seq: Sequence) -> bool:
    """Still in its reasoning block (or not yet known whether it opens one): no answer yet."""
    return seq.reasoning is not None and seq.reasoning.active
