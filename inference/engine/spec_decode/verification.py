"""What a verification step decides once its rows are sampled (engine.py, `_verify`).

Sampling each row and comparing it with the guess is standard speculative sampling for a
deterministic proposer: with a guess drawn from a point mass q, rejection sampling accepts it with
probability p(guess) and otherwise samples from p with the guess removed, which is the same law as
drawing from p and keeping the guess when the draw equals it. Drawing is what plain decoding does,
so the sequence writes the very tokens it would have written without guesses.
"""

from __future__ import annotations

import dataclasses

from ..outputs import RequestOutput


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
