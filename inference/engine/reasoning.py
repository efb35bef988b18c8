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
    def __init__(self, end_ids: list[int], budget: int | None):
        self.end_ids = end_ids
        self.budget = budget
        self.active = bool(end_ids)  # still reasoning: the end marker has not been written yet
        self.tokens = 0  # reasoning tokens so far (the end marker's included)
        self.forcing: list[int] = []  # the end marker's tokens still to write, once the budget is spent

    @property
    def forced_token(self) -> int | None:
        """The token the next step must sample (the budget ran out), or None."""
        return self.forcing[0] if self.active and self.forcing else None

    def observe(self, output_ids: list[int]) -> None:
        """After a token was appended to the output: count it, and end the phase at the marker."""
        if not self.active:
            return
        self.tokens += 1
        if self.forcing and output_ids[-1] == self.forcing[0]:
            self.forcing.pop(0)
        if output_ids[-len(self.end_ids) :] == self.end_ids:
            self.active, self.forcing = False, []
        elif self.budget is not None and self.tokens >= self.budget and not self.forcing:
            self.forcing = list(self.end_ids)
