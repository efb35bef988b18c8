"""What a verification decides from its sampled rows (engine/spec_decode/verification.py)."""

from __future__ import annotations

from types import SimpleNamespace

from inference.engine.outputs import RequestOutput, TokenLogprob
from inference.engine.spec_decode.verification import accepted_count, merged_output, spec_counts


def test_guesses_are_accepted_up_to_the_first_that_differs():
    assert accepted_count([5, 6, 7], [5, 6, 7, 8]) == 3
    assert accepted_count([5, 6, 7], [5, 9, 7, 8]) == 1
    assert accepted_count([5, 6, 7], [4, 6, 7, 8]) == 0
    assert accepted_count([], [4]) == 0


def test_a_verifications_outputs_merge_as_if_each_came_from_its_own_step():
    first_prompt = [None, TokenLogprob(1, "a", -0.5)]
    outputs = [
        RequestOutput("r", "Hel", [1], logprobs=[TokenLogprob(1, "Hel", -0.1)], prompt_logprobs=first_prompt),
        RequestOutput("r", "lo", [2], logprobs=[TokenLogprob(2, "lo", -0.2)]),
        RequestOutput("r", "!", [3], finished=True, finish_reason="stop", completion_tokens=3),
    ]
    merged = merged_output(outputs)
    assert (merged.text, merged.token_ids, merged.finish_reason, merged.completion_tokens) == ("Hello!", [1, 2, 3], "stop", 3)
    assert [lp.token_id for lp in merged.logprobs] == [1, 2] and merged.prompt_logprobs is first_prompt
    assert merged_output(outputs[:1]) is outputs[0]


def test_speculation_counts_are_reported_only_for_a_speculating_sequence():
    assert spec_counts(SimpleNamespace(spec=None)) == {}
    spec = SimpleNamespace(proposed=8, accepted=5, prediction_proposed=4, prediction_accepted=3)
    assert spec_counts(SimpleNamespace(spec=spec)) == {
        "spec_draft_tokens": 8,
        "spec_accepted_tokens": 5,
        "prediction_draft_tokens": 4,
        "prediction_accepted_tokens": 3,
    }
