"""LLMEngine end to end: batching changes no output, continuous batching, preemption, abort, prefix cache."""

from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.errors import PromptTooLongError
from inference.engine.sample.sampling_params import SamplingParams, SamplingParamsError
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, run_to_completion, trace_steps

PROMPTS = [
    "The future of AI inference is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Paris is the capital of",
    "To make a cup of tea, first",
    "The largest planet in our solar system",
    "Water boils at a temperature of",
]


def test_eight_prompts_batched_match_hf_alone(real_hf_model, real_bundle, smollm_tokenizer):
    engine = LLMEngine(EngineConfig(dtype="float32", device="cpu", kv_cache_mb=32), bundle=real_bundle)
    prompts = [smollm_tokenizer(p).input_ids for p in PROMPTS]
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{i}", ids, greedy(12))
    results = run_to_completion(engine)
    for i, ids in enumerate(prompts):
        assert generated_ids(results[f"r{i}"]) == hf_greedy(real_hf_model, ids, 12), PROMPTS[i]


def test_text_deltas_join_to_the_decoded_tokens(real_bundle):
    engine = LLMEngine(EngineConfig(dtype="float32", device="cpu", kv_cache_mb=32), bundle=real_bundle)
    engine.add_request("r", engine.tokenize("Write a haiku about the sea."), greedy(20))
    outputs = run_to_completion(engine)["r"]
    text = "".join(o.text for o in outputs)
    assert text == engine.tokenizer.decode(generated_ids(outputs), skip_special_tokens=True)
    final = outputs[-1]
    assert final.finished and final.finish_reason == "length" and final.completion_tokens == 20
    assert final.first_token_time is not None and final.first_token_time >= final.arrival_time


def test_request_joining_mid_decode_starts_next_step_and_changes_nothing(tiny_hf, smollm_tokenizer):
    alone = engine_for(tiny_hf, smollm_tokenizer)
    alone.add_request("a", alone.tokenize("alpha beta gamma"), greedy(20))
    alone.add_request("b", alone.tokenize("one two three four"), greedy(20))
    expected = {k: generated_ids(v) for k, v in run_to_completion(alone).items()}
    alone.add_request("c", alone.tokenize("late arrival here"), greedy(10))
    expected["c"] = generated_ids(run_to_completion(alone)["c"])

    engine = engine_for(tiny_hf, smollm_tokenizer)
    steps = trace_steps(engine)
    engine.add_request("a", engine.tokenize("alpha beta gamma"), greedy(20))
    engine.add_request("b", engine.tokenize("one two three four"), greedy(20))
    results: dict[str, list] = {}
    for _ in range(5):  # a and b are decoding now
        for out in engine.step():
            results.setdefault(out.request_id, []).append(out)
    assert set(steps.last.decodes) == {"a", "b"}
    engine.add_request("c", engine.tokenize("late arrival here"), greedy(10))
    for out in engine.step():
        results.setdefault(out.request_id, []).append(out)
    assert [r for r, _ in steps.last.prefills] == ["c"]  # admitted in the very next step...
    assert set(steps.last.decodes) == {"a", "b"}  # ...without pausing the others
    for key, outs in run_to_completion(engine).items():
        results.setdefault(key, []).extend(outs)
    assert {k: generated_ids(v) for k, v in results.items()} == expected


def test_slot_freed_by_eos_is_refilled_in_the_next_step(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, max_num_seqs=2)
    steps = trace_steps(engine)
    probe = engine_for(tiny_hf, smollm_tokenizer)
    probe.add_request("p", probe.tokenize("short lived"), greedy(6))
    eos_token = generated_ids(run_to_completion(probe)["p"])[3]
    engine.bundle.eos_token_ids = {eos_token}  # this prompt's 4th greedy token now ends it

    engine.add_request("short", engine.tokenize("short lived"), SamplingParams(temperature=0.0, max_tokens=50))
    engine.add_request("long", engine.tokenize("a much longer running request"), greedy(40))
    engine.add_request("queued", engine.tokenize("waiting for a slot"), greedy(5))
    trace = []
    while engine.has_work():
        finished = {o.request_id: o.finish_reason for o in engine.step() if o.finished}
        trace.append((steps.last, finished))
        if "short" in finished:
            break
    assert trace[-1][1]["short"] == "stop"
    assert "queued" not in trace[-1][0].request_ids  # no slot while "short" ran
    engine.step()
    assert [r for r, _ in steps.last.prefills] == ["queued"]
    assert "long" in steps.last.decodes


def test_preemption_with_tiny_pool_keeps_outputs_identical(tiny_hf, smollm_tokenizer):
    prompts = {f"r{i}": f"request number {i} asks about topic {i * 7}" for i in range(4)}
    roomy = engine_for(tiny_hf, smollm_tokenizer, block_size=4)
    for rid, prompt in prompts.items():
        roomy.add_request(rid, roomy.tokenize(prompt), greedy(30))
    expected = {k: generated_ids(v) for k, v in run_to_completion(roomy).items()}

    tight = engine_for(tiny_hf, smollm_tokenizer, block_size=4, num_kv_blocks=14)
    for rid, prompt in prompts.items():
        tight.add_request(rid, tight.tokenize(prompt), greedy(30))
    results = run_to_completion(tight)
    assert tight.scheduler.num_preemptions > 0
    assert {k: generated_ids(v) for k, v in results.items()} == expected
    assert tight.kv_cache.num_free_blocks == tight.kv_cache.num_blocks


def test_abort_frees_every_block_for_running_and_waiting(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, max_num_seqs=2, block_size=4)
    total = engine.kv_cache.num_blocks
    for rid in ("run1", "run2", "wait1"):
        engine.add_request(rid, engine.tokenize("some prompt that spans several blocks of four tokens"), greedy(50))
    for _ in range(3):
        engine.step()
    assert {s.request_id for s in engine.scheduler.running} == {"run1", "run2"}
    assert engine.kv_cache.num_free_blocks < total
    for rid in ("run1", "wait1", "run2"):
        assert engine.abort(rid)
    assert engine.kv_cache.num_free_blocks == total
    assert all(slot is None for slot in engine.scheduler.slots)
    finals = {o.request_id: o for o in engine.step()}
    assert {rid: o.finish_reason for rid, o in finals.items()} == {"run1": "abort", "run2": "abort", "wait1": "abort"}
    assert not engine.has_work()
    assert not engine.abort("run1")  # unknown/finished ids are a no-op


def test_prefix_cache_hit_is_counted_and_output_identical(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, block_size=4)
    long_prompt = "You are a helpful assistant. Answer briefly and precisely. " * 4 + "Question: what is two plus two?"
    engine.add_request("first", engine.tokenize(long_prompt), greedy(12))
    first = generated_ids(run_to_completion(engine)["first"])
    hits_before = engine.kv_cache.prefix_hits
    engine.add_request("second", engine.tokenize(long_prompt), greedy(12))
    [seq] = engine.requests["second"]
    results = run_to_completion(engine)
    prompt_len = len(engine.tokenize(long_prompt))
    assert engine.kv_cache.prefix_hits - hits_before == (prompt_len - 1) // 4
    assert seq.num_prefix_hit_tokens == (prompt_len - 1) // 4 * 4
    assert generated_ids(results["second"]) == first
    assert engine.stats().prefix_cache_hit_rate > 0


def test_seeded_sampling_is_independent_of_batch_composition(tiny_hf, smollm_tokenizer):
    params = dict(temperature=0.9, top_p=0.95, top_k=50, max_tokens=16, seed=1234, ignore_eos=True)
    alone = engine_for(tiny_hf, smollm_tokenizer)
    alone.add_request("x", alone.tokenize("tell me a story"), SamplingParams(**params))
    expected = generated_ids(run_to_completion(alone)["x"])

    crowded = engine_for(tiny_hf, smollm_tokenizer)
    crowded.add_request("other1", crowded.tokenize("noise"), SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True))
    crowded.add_request("other2", crowded.tokenize("more noise here"), SamplingParams(temperature=0.7, max_tokens=5, seed=9))
    crowded.add_request("x", crowded.tokenize("tell me a story"), SamplingParams(**params))
    assert generated_ids(run_to_completion(crowded)["x"]) == expected


def test_stop_string_ends_the_request_without_leaking(tiny_hf, smollm_tokenizer):
    probe = engine_for(tiny_hf, smollm_tokenizer)
    probe.add_request("p", probe.tokenize("stop test prompt"), greedy(12))
    full = "".join(o.text for o in run_to_completion(probe)["p"])
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip()
    engine = engine_for(tiny_hf, smollm_tokenizer)
    engine.add_request("s", engine.tokenize("stop test prompt"), greedy(12, stop=[stop]))
    outputs = run_to_completion(engine)["s"]
    text = "".join(o.text for o in outputs)
    assert text == full[: full.index(stop)]
    assert outputs[-1].finish_reason == "stop"
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks


def test_logprobs_are_returned_with_token_text(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    engine.add_request("l", engine.tokenize("log probs please"), greedy(3, logprobs=2))
    outputs = run_to_completion(engine)["l"]
    for out in outputs:
        (lp,) = out.logprobs
        assert lp.token_id == out.token_ids[0] and lp.logprob <= 0
        assert len(lp.top) == 2 and lp.top[0][0] == lp.token_id  # greedy picks the most likely token
        assert lp.token == smollm_tokenizer.decode([lp.token_id])


def test_requests_that_cannot_fit_are_rejected_up_front(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    with pytest.raises(PromptTooLongError, match="512"):
        engine.add_request("big", list(range(10, 500)), greedy(100))
    with pytest.raises(SamplingParamsError) as err:
        engine.add_request("empty", [], greedy(5))
    assert err.value.param == "prompt"
    with pytest.raises(SamplingParamsError):
        engine.add_request("oov", [10, 10**6], greedy(5))
    assert not engine.has_work()


def test_stats_snapshot_reports_slots_blocks_and_throughput(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, max_num_seqs=3)
    engine.add_request("s1", engine.tokenize("stats please"), greedy(8))
    engine.step()
    engine.step()
    stats = engine.stats()
    assert stats.num_slots == 3 and len(stats.slots) == 3
    assert stats.slots[0] == {"request_id": "s1", "choice": 0, "tokens": 2}
    assert stats.running == 1 and stats.waiting == 0
    assert 0 < stats.kv_blocks_used < stats.kv_blocks_total
    assert stats.total_tokens_generated == 2 and stats.tokens_per_second > 0
    assert stats.model == "test-model" and stats.device == "cpu" and stats.dtype == "float32"


def test_prompt_logprobs_match_hf_through_chunked_prefill_and_a_warm_cache(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, block_size=4, num_kv_blocks=256, max_num_batched_tokens=7)
    ids = engine.tokenize("The quick brown fox jumps over the lazy dog because it wanted to")
    with torch.no_grad():
        reference = torch.log_softmax(tiny_hf(torch.tensor([ids])).logits[0].float(), dim=-1)
    for attempt in ("cold", "cached"):  # the second run's prompt blocks are in the prefix cache
        engine.add_request(attempt, ids, SamplingParams(max_tokens=2, temperature=0.0, prompt_logprobs=2))
        outputs = run_to_completion(engine)[attempt]
        items = outputs[0].prompt_logprobs
        assert all(out.prompt_logprobs is None for out in outputs[1:])
        assert len(items) == len(ids) and items[0] is None
        for position in range(1, len(ids)):
            item = items[position]
            assert item.token_id == ids[position] and item.token == smollm_tokenizer.decode([ids[position]])
            assert item.logprob == pytest.approx(reference[position - 1, ids[position]].item(), abs=1e-4)
            assert [t for t, _, _ in item.top] == reference[position - 1].topk(2).indices.tolist()


@pytest.mark.parametrize("pooling", ["last", "mean", "cls"])
def test_an_embedding_whose_last_chunk_is_one_token_is_pooled_not_sampled(tiny_hf, smollm_tokenizer, pooling):
    # nine tokens at eight a step: the last chunk, one token, is scheduled as a decode would be
    ids = list(range(200, 209))
    whole = engine_for(tiny_hf, smollm_tokenizer)
    chunked = engine_for(tiny_hf, smollm_tokenizer, max_num_batched_tokens=8)
    vectors = []
    for engine in (whole, chunked):
        engine.add_request("e", ids, SamplingParams(max_tokens=1, pooling=pooling))
        [out] = [o for o in run_to_completion(engine)["e"] if o.finished]
        assert out.finish_reason == "stop" and out.token_ids == [] and out.embedding is not None
        vectors.append(torch.tensor(out.embedding))
    assert torch.allclose(vectors[0], vectors[1], atol=1e-5)


def test_cls_pooling_is_the_first_tokens_hidden_state(tiny_hf, smollm_tokenizer):
    """A causal model's first position sees only the first token: CLS pooling of a prompt is the
    last-token pooling of its first token alone (and not the last token of the whole prompt)."""
    engine = engine_for(tiny_hf, smollm_tokenizer)
    embedded = {}
    for key, ids, pooling in (
        ("cls", list(range(300, 312)), "cls"),
        ("first", [300], "last"),
        ("last", list(range(300, 312)), "last"),
    ):
        engine.add_request(key, ids, SamplingParams(max_tokens=1, pooling=pooling))
        embedded[key] = torch.tensor([o for o in run_to_completion(engine)[key] if o.finished][0].embedding)
    assert torch.allclose(embedded["cls"], embedded["first"], atol=1e-5)
    assert not torch.allclose(embedded["cls"], embedded["last"], atol=1e-3)
