"""Speculative decoding is exact: with guesses verified (engine/spec_decode/proposer.py, spec_decode/verification.py) a
request writes the tokens it writes without them, greedy or seeded, alone or batched, through
chunked prefill, preemption, grammars and n; sampled output keeps its distribution; rejected
guesses give their cache slots and blocks back and never reach the prefix cache."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.sample.sampling_params import SamplingParams
from tests.support.engine_helpers import engine_for, generated_ids, greedy, run_to_completion, trace_steps

PASSAGE = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, trimmed the wick, "
    "polished the great lens and wrote the weather in a leather log book that his father had kept before him."
)
GROUNDED = [
    f"Repeat the following text exactly.\n\n{PASSAGE}",
    f"Summarise this in one sentence, quoting it where you can: {PASSAGE}",
    f'Return JSON {{"keeper": ..., "duties": [...]}} for this text: {PASSAGE}',
    "Copy this code and rename x to count:\ndef add(x):\n    x = x + 1\n    return x\n\nprint(add(2))",
    "List the words of this sentence, one per line: the cat sat on the mat by the door.",
    f"Translate into plain English, keeping most words: {PASSAGE}",
    "Continue the pattern: red blue green red blue green red blue green red blue",
    "Fix the typos and repeat: Teh quick brown fox jumsp over teh lazy dog and teh cat.",
    f"Quote the second half of this text: {PASSAGE}",
    "Write the alphabet twice: a b c d e f g h i j k l m n o p q r s t u v w x y z",
]
OPEN = [
    "What is the capital of France?",
    "Tell me a short story about a dragon.",
    "Why is the sky blue?",
    "Give me three tips for sleeping well.",
    "What is 17 times 23?",
    "Write a haiku about autumn.",
    "Who wrote Hamlet?",
    "Explain recursion to a child.",
    "Name five fruits.",
    "How do airplanes fly?",
]


def chat_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def real_engine(real_bundle, **config) -> LLMEngine:
    return LLMEngine(EngineConfig(dtype="float32", device="cpu", **config), bundle=real_bundle)


def complete(engine: LLMEngine, requests: dict[str, tuple[list[int], SamplingParams]]) -> dict[str, list[int]]:
    for rid, (ids, params) in requests.items():
        engine.add_request(rid, ids, params)
    return {rid: generated_ids(outs) for rid, outs in run_to_completion(engine).items()}


@pytest.fixture(scope="module")
def real_prompts(real_bundle):
    return [chat_ids(real_bundle.tokenizer, text) for text in GROUNDED + OPEN]


@pytest.fixture(scope="module")
def reference(real_bundle, real_prompts):
    """Each prompt's greedy reply with speculation off, all in one batch (batching changes no
    token: tests/engine/test_engine.py; the tests below also compare replies made alone)."""
    engine = real_engine(real_bundle, speculative="off")
    replies = complete(engine, {f"r{i}": (ids, greedy(40)) for i, ids in enumerate(real_prompts)})
    return [replies[f"r{i}"] for i in range(len(real_prompts))]


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_greedy_replies_are_token_for_token_those_without_speculation(real_bundle, real_prompts, reference, mode):
    # all twenty at once, their prompts chunked (48 tokens a step) beside the others' decodes and verifications
    engine = real_engine(real_bundle, speculative=mode, max_num_batched_tokens=48)
    batched = complete(engine, {f"p{i}": (ids, greedy(40)) for i, ids in enumerate(real_prompts)})
    assert [batched[f"p{i}"] for i in range(len(real_prompts))] == reference
    assert engine.speculator.num_accepted_tokens > 40  # the grounded prompts' guesses were verified and taken
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks
    for i in (0, 3, 11):  # and alone
        assert complete(engine, {"alone": (real_prompts[i], greedy(40))})["alone"] == reference[i]


def test_a_verification_step_mixes_with_decodes_and_prefill_chunks(real_bundle, real_prompts):
    engine = real_engine(real_bundle, speculative="ngram", max_num_batched_tokens=32)
    steps = trace_steps(engine)
    engine.add_request("grounded", real_prompts[0], greedy(30))
    engine.add_request("open", real_prompts[10], greedy(30))
    seen = set()
    while engine.has_work():
        engine.step()
        trace = steps.last
        if trace.verifies and trace.decodes:
            seen.add("with decodes")
        if trace.verifies and trace.prefills:
            seen.add("with a prefill chunk")
        if len(seen) == 1 and not trace.prefills and "late" not in engine.requests:
            engine.add_request("late", real_prompts[1], greedy(5))  # a long prompt arrives while it verifies
    assert seen == {"with decodes", "with a prefill chunk"}


def test_seeded_sampling_writes_the_same_tokens_with_speculation(real_bundle, real_prompts):
    params = {
        "plain": dict(temperature=0.8, seed=7),
        "filtered": dict(temperature=1.0, top_p=0.9, top_k=40, seed=8),
        "penalised": dict(temperature=0.7, repetition_penalty=1.2, frequency_penalty=0.3, seed=9),
        "min tokens": dict(temperature=0.9, min_tokens=30, seed=10),
    }

    def requests():
        return {name: (real_prompts[i % 3], SamplingParams(max_tokens=40, **kw)) for i, (name, kw) in enumerate(params.items())}

    off = complete(real_engine(real_bundle, speculative="off"), requests())
    engine = real_engine(real_bundle, speculative="ngram")
    assert complete(engine, requests()) == off
    assert engine.speculator.num_draft_tokens > 0


def test_stops_max_tokens_logprobs_and_eos_behave_as_without_speculation(real_bundle, real_prompts):
    def run(mode):
        engine = real_engine(real_bundle, speculative=mode)
        requests = {
            "stop": (real_prompts[0], SamplingParams(temperature=0, max_tokens=60, stop=["spiral"])),
            "length": (real_prompts[0], SamplingParams(temperature=0, max_tokens=13)),
            "logprobs": (real_prompts[9], SamplingParams(temperature=0, max_tokens=20, logprobs=3)),
            "eos": (real_prompts[4], SamplingParams(temperature=0, max_tokens=200)),
        }
        for rid, (ids, params) in requests.items():
            engine.add_request(rid, ids, params)
        return run_to_completion(engine)

    off, on = run("off"), run("ngram")
    for rid in off:
        assert generated_ids(on[rid]) == generated_ids(off[rid])
        assert "".join(o.text for o in on[rid]) == "".join(o.text for o in off[rid])
        assert (on[rid][-1].finish_reason, on[rid][-1].stop_reason) == (off[rid][-1].finish_reason, off[rid][-1].stop_reason)
    assert on["stop"][-1].stop_reason == "spiral" and on["length"][-1].finish_reason == "length"
    for outputs in on.values():  # guesses past a finish are not counted as taken
        assert outputs[-1].spec_accepted_tokens < outputs[-1].completion_tokens
    assert on["eos"][-1].finish_reason == "stop" and on["eos"][-1].stop_reason is None
    lp_on = [lp for o in on["logprobs"] for lp in o.logprobs]
    lp_off = [lp for o in off["logprobs"] for lp in o.logprobs]
    assert [lp.token_id for lp in lp_on] == [lp.token_id for lp in lp_off]
    assert [[t for t, _, _ in lp.top] for lp in lp_on] == [[t for t, _, _ in lp.top] for lp in lp_off]
    assert all(math.isclose(a.logprob, b.logprob, abs_tol=1e-4) for a, b in zip(lp_on, lp_off))
    assert on["logprobs"][-1].spec_accepted_tokens > 0 and max(len(o.token_ids) for o in on["logprobs"]) > 1


def test_preempted_speculating_sequences_recompute_and_write_the_same(real_bundle, real_prompts):
    def requests():
        return {f"p{i}": (real_prompts[i], greedy(48)) for i in range(4)}

    off = complete(real_engine(real_bundle, speculative="off", num_kv_blocks=400), requests())
    engine = real_engine(real_bundle, speculative="ngram", block_size=4, num_kv_blocks=110)
    assert complete(engine, requests()) == off
    assert engine.scheduler.num_preemptions > 0 and engine.speculator.num_accepted_tokens > 0
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks


# -- the tiny model: rollback, aborts, grammars, n, the distribution ---------------------------------


def tiny_engine(tiny_hf, tokenizer, **config) -> LLMEngine:
    return engine_for(tiny_hf, tokenizer, **{"speculative": "ngram", **config})


def first_token(engine: LLMEngine, prompt: list[int]) -> int:
    """The greedy first token (a prediction starting with it is followed, and guessed from, at once)."""
    probe = LLMEngine(EngineConfig(dtype="float32", device="cpu", speculative="off"), bundle=engine.bundle)
    return complete(probe, {"first": (prompt, greedy(1))})["first"][0]


def test_rejected_guesses_give_back_their_blocks_and_never_reach_the_prefix_cache(tiny_hf, smollm_tokenizer):
    engine = tiny_engine(tiny_hf, smollm_tokenizer, block_size=4, num_kv_blocks=64, spec_tokens=8)
    steps = trace_steps(engine)
    prompt = engine.tokenize("a prompt of a few words to start from")
    start = first_token(engine, prompt)
    wrong = next(t for t in range(5, 50) if t != start)
    engine.add_request("r", prompt, greedy(12, prediction=[start] + [wrong] * 12))  # guesses the model never writes
    engine.step()  # the prompt and its first token
    [seq] = engine.requests["r"]
    engine.step()
    assert steps.last.verifies == [("r", 8)]
    assert seq.spec.accepted == 0 and seq.spec.proposed == 8
    # the step took blocks for 1 + 8 positions: all but the verified ones and the next token's slot are back
    assert len(seq.block_table) == -(-(seq.num_computed_tokens + 1) // 4)
    assert engine.kv_cache.num_used_blocks == len(seq.block_table)
    outputs = run_to_completion(engine)["r"]
    assert outputs[-1].prediction_draft_tokens >= 8 and outputs[-1].prediction_accepted_tokens == 0
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks
    verified = {tuple(seq.token_ids[i : i + 4]) for i in range(0, len(seq.token_ids), 4)}
    named = [block.token_ids for block in engine.kv_cache.blocks if block.hash is not None]
    assert named and all(tokens in verified for tokens in named)  # every named block holds verified tokens
    assert all(wrong not in tokens for tokens in named)


def test_an_abort_during_a_verification_step_frees_everything(tiny_hf, smollm_tokenizer):
    engine = tiny_engine(tiny_hf, smollm_tokenizer, block_size=4, num_kv_blocks=64)
    steps = trace_steps(engine)
    prompt = engine.tokenize("stay a while and listen")
    start = first_token(engine, prompt)
    engine.add_request("gone", prompt, greedy(30, prediction=[start] + list(range(100, 130))))
    engine.add_request("stays", prompt, greedy(6))
    engine.step()
    # the client leaves while a verification step runs: the engine thread applies the abort as the
    # step returns (its commands are handled between steps), with the step's outputs not yet sent
    during = []
    engine.test_faults.step = lambda: during.append(list(steps.last.verifies))
    engine.step()
    engine.test_faults.step = None
    assert during == [[("gone", 8)]]
    [seq] = engine.requests["gone"]
    assert engine.abort("gone")
    assert seq.block_table == [] and seq.is_finished
    assert [o.finish_reason for o in engine.step() if o.request_id == "gone"] == ["abort"]
    rest = run_to_completion(engine)
    assert "gone" not in rest and rest["stays"][-1].finished
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks


def test_a_guess_the_grammar_forbids_is_never_proposed_and_grammars_hold(tiny_hf, smollm_tokenizer):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "size": {"type": "integer"}}, "required": ["city"]}
    structured = {"kind": "json_schema", "value": schema}
    guess = smollm_tokenizer.encode('{"city": "Paris", "size": 3}', add_special_tokens=False)
    bad = smollm_tokenizer.encode("not json at all", add_special_tokens=False)

    def run(mode, prediction):
        engine = tiny_engine(tiny_hf, smollm_tokenizer, speculative=mode)
        engine.add_request(
            "g",
            engine.tokenize("a city as JSON"),
            SamplingParams(temperature=0, max_tokens=30, structured=structured, prediction=prediction),
        )
        outputs = run_to_completion(engine)["g"]
        return generated_ids(outputs), outputs[-1], engine

    expected, _, _ = run("off", None)
    for prediction in (guess, bad):
        tokens, last, engine = run("ngram", prediction)
        assert tokens == expected
    assert last.prediction_draft_tokens == 0  # no token of "not json" fits the grammar: none was guessed
    tokens, last, _ = run("ngram", expected)  # the reply itself as the prediction: guessed, and taken
    assert tokens == expected and last.prediction_accepted_tokens >= len(expected) // 2
    assert last.prediction_accepted_tokens == last.prediction_draft_tokens


def test_n_completions_each_write_their_seeded_tokens(tiny_hf, smollm_tokenizer):
    def run(mode, prediction=None):
        engine = tiny_engine(tiny_hf, smollm_tokenizer, speculative=mode)
        prompt = engine.tokenize("one two three one two three one two three one two")
        params = SamplingParams(temperature=0.7, seed=3, n=3, max_tokens=24, ignore_eos=True, prediction=prediction)
        engine.add_request("n", prompt, params)
        by_index: dict[int, list[int]] = {}
        for out in run_to_completion(engine)["n"]:
            by_index.setdefault(out.index, []).extend(out.token_ids)
        return by_index, engine

    off, _ = run("off")
    on, engine = run("ngram", prediction=off[0])  # the first completion's reply, guessed for all three
    assert on == off and engine.speculator.num_accepted_tokens > 0


def test_sampled_tokens_follow_the_same_distribution_with_speculation(tiny_hf, smollm_tokenizer):
    """Unseeded draws, guesses from a prediction of the likeliest tokens: the frequencies of the
    second to fourth tokens (the verified ones) match speculation off's (chi-square, two samples)."""
    from scipy.stats import chi2_contingency

    prompt = smollm_tokenizer.encode("the weather today is")
    probe = engine_for(tiny_hf, smollm_tokenizer, speculative="off")
    likeliest = complete(probe, {"g": (prompt, greedy(4))})["g"]
    samples = 480

    def tally(mode):
        torch.manual_seed(1234)
        engine = engine_for(tiny_hf, smollm_tokenizer, speculative=mode, max_num_seqs=32)
        # top_k 3: the tiny model's flat distribution narrowed so that guesses are right a third of the time
        params = SamplingParams(temperature=1.0, top_k=3, max_tokens=4, ignore_eos=True, prediction=likeliest)
        replies = complete(engine, {f"s{i}": (prompt, params) for i in range(samples)})
        return [tuple(r[1:4]) for r in replies.values()], engine

    off, _ = tally("off")
    on, engine = tally("ngram")
    assert engine.speculator.num_accepted_tokens > samples // 10  # the guesses were taken often enough to matter
    for position in (0, 1, 2):
        counts = {}
        for pair in on:
            counts.setdefault(pair[position], [0, 0])[0] += 1
        for pair in off:
            counts.setdefault(pair[position], [0, 0])[1] += 1
        frequent = [c for c in counts.values() if sum(c) >= 10]
        rare = [sum(c[0] for c in counts.values() if sum(c) < 10), sum(c[1] for c in counts.values() if sum(c) < 10)]
        table = frequent + ([rare] if sum(rare) else [])
        assert len(table) >= 3
        assert chi2_contingency(table).pvalue > 1e-3


# -- tools offered: the tool-call trigger watches while guesses are verified ------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# text -> what logit_bias pushes up: asked for the weather with the tag's tokens pushed, the 135M
# writes the tag (the n-gram guesses hold its tokens, from the tools prompt and its own text); a
# first `{` pushed opens JSON that decides, guessed while a call still takes it
ASKS_FOR_A_CALL = {
    "What is the weather in Paris?": "<tool_call>",
    "Weather in Oslo, please.": "<tool_call>",
    f'Return JSON {{"keeper": ..., "duties": [...]}} for this text: {PASSAGE}': "{",
}


def tool_requests(tokenizer, texts: list[str]) -> dict[str, tuple[list[int], SamplingParams]]:
    """Each text as the chat API sends it with a weather tool offered under auto: the tools in the
    prompt, the reply watched by the tool-call trigger (engine/sample/tool_trigger.py)."""
    from inference.api.common.chat_template import render
    from inference.api.common.tool_calls import ToolRequest
    from inference.api.common.tool_parsers import tool_parser_for

    request = ToolRequest([WEATHER], "auto", True, tool_parser_for(tokenizer))
    requests = {}
    for i, text in enumerate(texts):
        prompt = render(tokenizer, [{"role": "user", "content": text}], tools=request.tools, tool_parser=request.parser)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        pushed = tokenizer.encode(ASKS_FOR_A_CALL[text], add_special_tokens=False) if text in ASKS_FOR_A_CALL else []
        bias = {token: 6.0 for token in pushed}
        params = SamplingParams(temperature=0.0, max_tokens=40, tool_trigger=request.trigger(), logit_bias=bias)
        requests[f"t{i}"] = (ids, params)
    return requests


def test_with_tools_offered_guesses_are_verified_and_the_tokens_unchanged(real_bundle):
    """The grounded prompts and two that ask for a call, tools offered: with speculation on, every
    reply is token for token the one without it, guesses were taken in the prose, and the replies
    that call open the call where they do without speculation."""
    texts = GROUNDED + list(ASKS_FOR_A_CALL)
    off_engine = real_engine(real_bundle, speculative="off")
    off = complete(off_engine, tool_requests(real_bundle.tokenizer, texts))
    engine = real_engine(real_bundle, speculative="ngram")
    on = complete(engine, tool_requests(real_bundle.tokenizer, texts))
    assert on == off
    assert engine.speculator.num_accepted_tokens > 40
    calls = [real_bundle.tokenizer.decode(off[f"t{i}"]) for i in range(len(GROUNDED), len(texts))]
    assert "<tool_call>" in calls[0] and calls[2].startswith("{"), calls


def test_a_guess_stops_before_the_token_that_completes_a_tag(smollm_tokenizer):
    from inference.api.common.tool_calls import ToolRequest
    from inference.api.common.tool_parsers import HermesToolParser
    from inference.engine.sample.tool_trigger import ToolTrigger

    spec = ToolRequest([WEATHER], "auto", True, HermesToolParser()).trigger()
    trigger = ToolTrigger(spec, lambda t: smollm_tokenizer.decode([t]), lambda s: smollm_tokenizer.encode(s))
    assert not trigger.may_guess  # before the answer's first token: nothing is guessed
    prose = smollm_tokenizer.encode("Sure, let me check.", add_special_tokens=False)
    trigger.observe(prose)
    assert trigger.may_guess
    draft = smollm_tokenizer.encode(" <tool_call>\n{", add_special_tokens=False)
    completes = next(n for n in range(1, len(draft) + 1) if "<tool_call>" in smollm_tokenizer.decode(draft[:n]))
    assert trigger.speculable(draft) == completes - 1 and trigger.speculable(draft[: completes - 1]) == completes - 1


def test_a_watched_reasoning_block_is_guessed_up_to_its_end_marker(real_bundle):
    """A reply that starts in a reasoning block, tools offered in a format whose bare `{` opens a
    call: guesses go on inside the block and stop before the end marker's last token, so the
    answer's first token is the model's own draw, drawn again as without speculation where it is
    a `{{`. The end marker is words the 135M writes as it repeats its prompt (" great lens"), and
    the answer after it starts with `{{`: a guess running past the marker would write that `{{`."""
    tokenizer = real_bundle.tokenizer
    text = "Repeat the following text exactly.\n\nThe great lens {{keeper}} shone. The great lens {{keeper}} shone."
    thinking = {"start": "<think>", "end": " great lens", "opened": True, "budget": None}

    def requests():
        [(ids, params)] = tool_requests(tokenizer, [text]).values()
        return {"think": (ids, dataclasses.replace(params, max_tokens=30, reasoning=thinking))}

    off = complete(real_engine(real_bundle, speculative="off"), requests())
    engine = real_engine(real_bundle, speculative="ngram")
    assert complete(engine, requests()) == off
    written = tokenizer.decode(off["think"])
    reasoning, answer = written.split(" great lens", 1)
    assert answer.lstrip().startswith("{") and not answer.lstrip().startswith("{{"), written  # drawn again
    assert engine.speculator.num_accepted_tokens > 0
