"""n completions of one prompt: the prompt is computed once, the children share its full KV
blocks and copy its partial last block, each samples with its own seed, and every block comes
back when they finish or are aborted."""

import pytest

from inference.engine.sample.sampling_params import SamplingParams, SamplingParamsError
from tests.support.engine_helpers import engine_for, generated_ids, run_to_completion, trace_steps

PROMPT = "Tell me about the harbour town and its lighthouse keeper"


def sampled(max_tokens=10, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=1.0, ignore_eos=True, **kw)


def by_index(outputs) -> dict[int, list[int]]:
    tokens: dict[int, list[int]] = {}
    for out in outputs:
        tokens.setdefault(out.index, []).extend(out.token_ids)
    return tokens


def test_each_child_is_the_request_alone_with_seed_plus_its_index(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, block_size=4, num_kv_blocks=256, enable_prefix_caching=False)
    ids = engine.tokenize(PROMPT)
    assert len(ids) % 4  # the prompt ends in a partial block: each child copies it
    engine.add_request("n", ids, sampled(seed=11, n=3))
    outputs = run_to_completion(engine)["n"]
    forked = by_index(outputs)
    alone = []
    for i in range(3):
        engine.add_request(f"alone-{i}", ids, sampled(seed=11 + i))
        alone.append(generated_ids(run_to_completion(engine)[f"alone-{i}"]))
    assert [forked[i] for i in range(3)] == alone
    assert len({tuple(t) for t in alone}) == 3  # three different completions
    finished = [out for out in outputs if out.finish_reason is not None]
    assert sorted(out.index for out in finished) == [0, 1, 2] and outputs[-1].finished
    assert [out.finished for out in outputs].count(True) == 1
    assert engine.kv_cache.num_used_blocks == 0


def test_the_prompt_is_prefilled_once_and_its_full_blocks_are_shared(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, block_size=4, num_kv_blocks=256)
    steps = trace_steps(engine)
    ids = engine.tokenize(PROMPT)
    engine.add_request("n", ids, sampled(seed=1, n=4))
    engine.step()  # the whole prompt, once
    assert steps.last.prefills == [("n", len(ids))]
    group = engine.requests["n"]
    assert len(group) == 4 and [s.index for s in group] == [0, 1, 2, 3]
    full = len(ids) // 4
    shared = group[0].block_table[:full]
    assert all(s.block_table[:full] == shared for s in group)
    assert all(engine.kv_cache.blocks[b].ref_count == 4 for b in shared)
    partial = [s.block_table[full] for s in group]
    assert len(set(partial)) == 4  # each its own copy of the last, partial block
    assert engine.stats().total_prompt_tokens == len(ids)
    assert sorted(slot["request_id"] for slot in engine.stats().slots if slot["request_id"]) == ["n"] * 4
    engine.step()
    assert sorted(steps.last.decodes) == ["n"] * 4  # all four decode; nothing is prefilled again
    assert engine.abort("n")  # a disconnect: every child goes, and every block with it
    assert [out.finished for out in engine.step()] == [True]
    assert all(b.ref_count == 0 for b in engine.kv_cache.blocks)


def test_children_count_against_the_slots(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, max_num_seqs=4)
    steps = trace_steps(engine)
    engine.add_request("three", engine.tokenize("first request"), sampled(n=3, max_tokens=20))
    engine.add_request("two", engine.tokenize("second request"), sampled(n=2, max_tokens=5))
    engine.step()
    assert steps.last.prefills == [("three", len(engine.tokenize("first request")))]  # 3 + 2 > 4 slots: "two" waits
    results = run_to_completion(engine)
    assert sorted(by_index(results["two"])) == [0, 1]
    with pytest.raises(SamplingParamsError) as err:
        engine.add_request("too-many", [5, 6], sampled(n=5))
    assert err.value.param == "n"


def test_greedy_children_agree_and_stop_reasons_are_reported(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    ids = engine.tokenize("The quick brown fox")
    engine.add_request("g", ids, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, n=2))
    tokens = by_index(run_to_completion(engine)["g"])
    assert tokens[0] == tokens[1]
    stop_token = tokens[0][3]
    engine.add_request("s", ids, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, stop_token_ids=[stop_token]))
    last = run_to_completion(engine)["s"][-1]
    assert last.finish_reason == "stop" and last.stop_reason == stop_token


def test_an_abort_ends_the_unfinished_choices_as_aborted(tiny_hf, smollm_tokenizer):
    """A choice that already finished keeps its reason; the request's last output says abort."""
    engine = engine_for(tiny_hf, smollm_tokenizer, num_kv_blocks=256)
    ids = engine.tokenize(PROMPT)
    engine.add_request("a", ids, sampled(n=2, max_tokens=300, seed=5))
    engine.step()
    [parent, child] = engine.requests["a"]
    child.params.max_tokens = 2  # this choice ends after two tokens; the other runs on
    while not child.is_finished:
        engine.step()
    assert engine.abort("a")
    [last] = engine.step()
    assert last.finished and last.finish_reason == "abort" and last.index == parent.index
