"""What a verification decides from its sampled rows (engine/spec_decode/verification.py)."""

from __future__ import annotations

from types import SimpleNamespace

from inference.engine.outputs import RequestOutput, TokenLogprob
from inference.engine.spec_decode.verification import accepted_count, guess_masks, merged_output, spec_counts


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


def test_a_guess_past_the_end_of_a_grammar_leaves_the_matcher_where_the_reply_is(smollm_tokenizer):
    """A forced single call stops its grammar at the call's last token; a guessed end of turn after
    it is taken without being recorded, and walking back over it used to undo the call's last real
    token too (the reply then ended at `</tool_call` with no call read)."""
    from inference.api.common.tool_parsers import HermesToolParser
    from tests.support.grammar_checks import encode, grammars_for

    grammars = grammars_for(smollm_tokenizer)
    function = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    grammar = HermesToolParser().bind(smollm_tokenizer).grammar([function], 1)
    ids = encode(smollm_tokenizer, '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>')
    matcher = grammars.matcher({"kind": "lark", "value": grammar})
    written, rest = ids[:-2], ids[-2:]
    assert matcher.consume_tokens(written)
    seq = SimpleNamespace(matcher=matcher, draft=[*rest, smollm_tokenizer.eos_token_id])
    rows = guess_masks(seq, {id(seq): grammars.allowed([matcher])[0]}, grammars)
    assert len(rows) == len(seq.draft) + 1
    assert [bool(rows[i][token]) for i, token in enumerate(rest)] == [True, True]  # each guess's row allows it
    assert rows[len(rest)] is None  # after the grammar's end: the sequence finishes there, no row is used
    assert matcher.validate_tokens(rest) == len(rest) and not matcher.is_stopped()  # back where the reply is
    assert matcher.consume_tokens(rest) and matcher.is_stopped()
