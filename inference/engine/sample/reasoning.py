"""A sequence's reasoning phase, as the engine needs to know it: thinking models write their
reasoning first and close it with an end marker (`</think>`). While it runs, a request's grammar
is not applied (structured outputs and forced tool calls constrain the answer only: vLLM's rule),
and a thinking budget, once spent, forces the end marker's tokens so the answer starts.

The request path decides whether the reply starts in reasoning (serving's reasoning parser reads
the rendered prompt) and passes `SamplingParams.reasoning = {"end": marker, "budget": n}`; the
engine tokenizes the marker once per sequence.
"""

from __future__ import annotations


class ReasoningState:
    """`start_ids`: the reply may open the block itself (the prompt did not): until its first tokens
    show whether it does, the phase is pending (grammars wait); a reply that does not open it has
    no reasoning phase at all (`observe` says so once, and the engine gives the grammar what was
    written meanwhile)."""

    def __init__(self, end_ids: list[int], budget: int | None, start_ids: list[int] | None = None):
        self.end_ids = end_ids
        self.budget = budget
        self.start_ids = start_ids or None
        self.pending = self.start_ids is not None  # not yet known whether the reply reasons
        self.active = bool(end_ids)  # still reasoning (or pending): the end marker has not been written yet
        self.tokens = 0  # reasoning tokens so far (the end marker's included)
        self.forcing: list[int] = []  # the end marker's tokens still to write, once the budget is spent

    @property
    def forced_token(self) -> int | None:
        """The token the next step must sample (the budget ran out), or None."""
        return self.forcing[0] if self.active and self.forcing else None

    def before_end(self, output_ids: list[int], draft: list[int]) -> int:
        """How many of the guessed tokens `draft` (to follow `output_ids`) come before the token
        that would complete the end marker: a guess stops there, so the marker's last token is the
        model's own draw and nothing after it is guessed (the answer's first token may be drawn
        again: engine/sample/tool_trigger.py)."""
        end = self.end_ids
        written = list(output_ids[max(0, len(output_ids) - len(end) + 1) :])  # a marker begun before the guesses
        for count, token_id in enumerate(draft):
            written.append(token_id)
            if written[-len(end) :] == end:
                return count
        return len(draft)

    def observe(self, output_ids: list[int]) -> bool:
        """After a token was appended to the output: count it, and end the phase at the marker.
        True once, when a pending reply turns out not to reason at all."""
        if not self.active:
            return False
        if self.pending:
            start = self.start_ids
            if output_ids[: len(start)] == start:
                self.pending = False  # it opened the block: reasoning from here
            elif start[: len(output_ids)] != output_ids:
                self.active = self.pending = False
                return True
        self.tokens += 1
        if self.forcing and output_ids[-1] == self.forcing[0]:
            self.forcing.pop(0)
        if output_ids[-len(self.end_ids) :] == self.end_ids:
            self.active, self.forcing = False, []
        elif self.budget is not None and self.tokens >= self.budget and not self.forcing and not self.pending:
            self.forcing = list(self.end_ids)
        return False
