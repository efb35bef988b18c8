"""A request resumed from the tokens its client was sent (engine/resume.py) carries on as the
uninterrupted request would have: greedy and seeded sampling token for token, a grammar from the
state the delivered text left it in, a stop string that spans the join, n = 2, and usage and
max_tokens counted over the whole output."""

from __future__ import annotations

import json

import pytest

from inference.engine.sample.sampling_params import SamplingParams
from tests.support.engine_helpers import engine_for, generated_ids, greedy, run_to_completion

PROMPT = "Once upon a time, in a land far away, there lived"
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 8, "maxLength": 16}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def run(engine, params: SamplingParams, resume=None) -> list:
    engine.add_request("r", engine.tokenize(PROMPT), params, resume=resume)
    return run_to_completion(engine)["r"]


def by_index(outputs) -> dict[int, list[int]]:
    tokens: dict[int, list[int]] = {}
    for out in outputs:
        tokens.setdefault(out.index, []).extend(out.token_ids)
    return tokens


@pytest.mark.parametrize(
    "params",
    [
        greedy(24),
        SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=24, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=11, max_tokens=24, ignore_eos=True, repetition_penalty=1.3),
    ],
    ids=["greedy", "seeded", "seeded-penalised"],
)
def test_a_resumed_request_continues_token_for_token(tiny_hf, smollm_tokenizer, params):
    expected = generated_ids(run(engine_for(tiny_hf, smollm_tokenizer), params))
    for delivered in (1, 9):
        rest = run(engine_for(tiny_hf, smollm_tokenizer), params, resume=[expected[:delivered]])
        assert generated_ids(rest) == expected[delivered:], delivered
        assert rest[-1].completion_tokens == 24 and rest[-1].finish_reason == "length"
        assert rest[-1].prompt_tokens == len(smollm_tokenizer(PROMPT).input_ids)


def test_a_grammar_resumes_from_the_state_the_delivered_text_left(tiny_hf, smollm_tokenizer):
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=60, structured={"kind": "json_schema", "value": SCHEMA})
    whole = run(engine_for(tiny_hf, smollm_tokenizer), params)
    expected = generated_ids(whole)
    text = "".join(out.text for out in whole)
    json.loads(text)
    cut = len(expected) // 2
    assert cut >= 2, text
    rest = run(engine_for(tiny_hf, smollm_tokenizer), params, resume=[expected[:cut]])
    assert generated_ids(rest) == expected[cut:]
    assert "".join(out.text for out in whole[:cut]) + "".join(out.text for out in rest) == text


def test_a_stop_string_across_the_join_is_found_and_held_back_text_comes_out(tiny_hf, smollm_tokenizer):
    """The stop string's first characters were delivered by the engine that died (as tokens; the
    text itself was held back, as it might be a stop string); the resumed engine finds the match."""
    tokens = generated_ids(run(engine_for(tiny_hf, smollm_tokenizer), greedy(24)))
    text = [smollm_tokenizer.decode(tokens[:i]) for i in range(len(tokens) + 1)]

    def spanning(cut: int) -> str:  # the text of tokens cut - 1 (delivered) and cut (the resumed engine's)
        return text[cut + 1][len(text[cut - 1]) :]

    cut = next(c for c in range(4, 20) if len(spanning(c).strip()) >= 3 and spanning(c) not in text[c])
    stop = spanning(cut)
    params = greedy(24, stop=[stop])
    whole = run(engine_for(tiny_hf, smollm_tokenizer), params)
    assert whole[-1].finish_reason == "stop" and whole[-1].stop_reason == stop
    rest = run(engine_for(tiny_hf, smollm_tokenizer), params, resume=[tokens[:cut]])
    assert rest[-1].finish_reason == "stop" and rest[-1].stop_reason == stop
    sent_before = "".join(out.text for out in whole[:cut])  # what the client had when the first engine died
    assert sent_before + "".join(out.text for out in rest) == "".join(out.text for out in whole)


def test_n_2_resumes_each_completion_and_skips_a_finished_one(tiny_hf, smollm_tokenizer):
    params = SamplingParams(temperature=0.9, seed=5, n=2, max_tokens=16, ignore_eos=True)
    expected = by_index(run(engine_for(tiny_hf, smollm_tokenizer), params))
    rest = by_index(run(engine_for(tiny_hf, smollm_tokenizer), params, resume=[expected[0][:4], expected[1][:10]]))
    assert rest == {0: expected[0][4:], 1: expected[1][10:]}
    only_second = by_index(run(engine_for(tiny_hf, smollm_tokenizer), params, resume=[None, expected[1][:3]]))
    assert only_second == {1: expected[1][3:]}


def test_a_malformed_resume_is_refused(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    with pytest.raises(ValueError, match="one entry per completion"):
        engine.add_request("r", engine.tokenize(PROMPT), greedy(4), resume=[[1], [2]])
    with pytest.raises(ValueError, match="nothing to resume"):
        engine.add_request("r", engine.tokenize(PROMPT), greedy(4), resume=[None])


def test_a_request_resumed_twice_carries_everything_its_client_was_sent(tiny_hf, smollm_tokenizer):
    """Progress (what an engine thread or a web process keeps per request): a request that arrived
    resumed counts what it carried as delivered, so a second death resumes from all of it."""
    from inference.engine.resume import Progress

    expected = generated_ids(run(engine_for(tiny_hf, smollm_tokenizer), greedy(24)))
    progress = Progress(smollm_tokenizer(PROMPT).input_ids, greedy(24), "b", resume=[expected[:5]])
    engine = engine_for(tiny_hf, smollm_tokenizer)
    engine.add_request("r", progress.prompt, progress.params, resume=progress.resume_on("b"))
    for _ in range(4):
        for out in engine.step():
            progress.record(out)
    engine.abort("r")
    engine.step()
    rest = run(engine_for(tiny_hf, smollm_tokenizer), progress.params, resume=progress.resume_on("c"))
    assert progress.delivered[0] + generated_ids(rest) == expected and len(progress.delivered[0]) > 5
    assert [s["engine"] for s in progress.segments] == ["b", "b", "c"]
