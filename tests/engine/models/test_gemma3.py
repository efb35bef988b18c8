"""Gemma 3 against transformers' Gemma3ForCausalLM where its sliding window matters: prompts longer
than the window, alone, batched, chunked and preempted, all giving HF's greedy tokens.
(test_numerics.py holds its logits against HF's with the other families.)"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_gemma3_hf
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, run_to_completion

PROMPTS = {
    "a": "The quick brown fox jumps over the lazy dog while the farmer sleeps in the barn",
    "b": "one two",
    "c": "Once upon a time, in a land far away, there lived a king who had three daughters",
}


@pytest.fixture(scope="module")
def hf():
    return tiny_gemma3_hf()


@pytest.fixture(scope="module")
def expected(hf, smollm_tokenizer):
    return {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 20) for key, text in PROMPTS.items()}


def test_the_window_changes_what_the_model_says(hf, smollm_tokenizer):
    """The reference itself differs with a window wider than the prompt: the tests below exercise it."""
    wide = tiny_gemma3_hf(sliding_window=512)
    ids = torch.tensor([smollm_tokenizer(PROMPTS["a"]).input_ids])
    with torch.no_grad():
        assert not torch.allclose(hf(ids).logits[0, -1], wide(ids).logits[0, -1], atol=1e-3)


def test_prompts_alone_batched_and_chunked_give_hfs_greedy_tokens(hf, smollm_tokenizer, expected):
    from inference.engine.models.gemma3 import Gemma3ForCausalLM

    for key, text in PROMPTS.items():
        alone = engine_for(hf, smollm_tokenizer, block_size=4)
        alone.add_request(key, smollm_tokenizer(text).input_ids, greedy(20))
        assert generated_ids(run_to_completion(alone)[key]) == expected[key], key
    batched = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=7)  # chunked prefill beside decodes
    assert isinstance(batched.bundle.model, Gemma3ForCausalLM)
    for key, text in PROMPTS.items():
        batched.add_request(key, smollm_tokenizer(text).input_ids, greedy(20))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(batched).items()} == expected


def test_preempted_sequences_recompute_to_the_same_tokens(hf, smollm_tokenizer, expected):
    tight = engine_for(hf, smollm_tokenizer, block_size=4, num_kv_blocks=16)
    for key, text in PROMPTS.items():
        tight.add_request(key, smollm_tokenizer(text).input_ids, greedy(20))
    results = run_to_completion(tight)
    assert tight.scheduler.num_preemptions > 0
    assert {key: generated_ids(outs) for key, outs in results.items()} == expected
    assert tight.kv_cache.num_free_blocks == tight.kv_cache.num_blocks


def test_a_prefix_cached_prompt_gives_the_same_tokens(hf, smollm_tokenizer, expected):
    """The second run reads the first's blocks for its shared prefix, windowed layers included."""
    engine = engine_for(hf, smollm_tokenizer, block_size=4)
    ids = smollm_tokenizer(PROMPTS["c"]).input_ids
    for key in ("first", "second"):
        engine.add_request(key, ids, greedy(20))
        assert generated_ids(run_to_completion(engine)[key]) == expected["c"]
    assert engine.kv_cache.prefix_hits > 0


def test_in_bfloat16_the_norms_stay_float32_as_transformers_computes_them(hf, smollm_tokenizer):
    """`1 + weight` rounded to bfloat16 moves by up to 1/256 a channel; kept float32, our bf16 model is
    as close to the float32 reference as transformers' own bf16 model is."""
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine
    from inference.engine.loader import build_bundle
    from tests.support.engine_helpers import prefill_logits

    config = EngineConfig(dtype="bfloat16", device="cpu")
    bundle = build_bundle(hf.config, smollm_tokenizer, hf.state_dict(), name="tiny-gemma3", config=config)
    norms = [m for name, m in bundle.model.named_modules() if name.endswith("norm")]
    assert norms and all(m.weight.dtype == torch.float32 for m in norms)
    assert bundle.model.embed_tokens.weight.dtype == torch.bfloat16
    ids = torch.tensor(smollm_tokenizer(PROMPTS["a"]).input_ids)
    with torch.no_grad():
        reference = hf(ids[None]).logits[0, -1]
        theirs = tiny_gemma3_hf().to(torch.bfloat16)(ids[None]).logits[0, -1].float()
    ours = prefill_logits(LLMEngine(config, bundle=bundle), ids)[-1].float()
    assert (ours - reference).abs().max() <= 2 * (theirs - reference).abs().max()


def test_float16_is_refused_when_asked_and_avoided_under_auto(hf, smollm_tokenizer):
    """Gemma 3's activations outgrow float16 (vLLM refuses it too); `auto` picks float16 only on a
    GPU before Ampere, where Gemma 3 then runs in float32."""
    import pytest

    from inference.engine.config import EngineConfig
    from inference.engine.loader import ModelLoadError, _dtype_for, build_bundle
    from inference.engine.models.gemma3 import Gemma3ForCausalLM

    with pytest.raises(ModelLoadError, match="MINIVLLM_DTYPE=bfloat16 or float32"):
        build_bundle(hf.config, smollm_tokenizer, hf.state_dict(), name="g", config=EngineConfig(dtype="float16", device="cpu"))
    assert _dtype_for(Gemma3ForCausalLM, torch.float16, "auto") == torch.float32
    assert _dtype_for(Gemma3ForCausalLM, torch.bfloat16, "auto") == torch.bfloat16


def test_the_sliding_window_layers_keep_each_slots_window_not_the_context(hf, smollm_tokenizer):
    """Their K/V lives in a pool of its own, sized by slots and a step's tokens; a long reply still
    gives HF's tokens, and every block comes back when it ends."""
    from inference.engine.kv_cache.sliding_window import SlidingWindowBlocks

    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_seqs=2, max_num_batched_tokens=16, speculative="off")
    runner, window = engine.model_runner, engine.kv_cache.window
    assert window is not None and window.window == 8
    assert runner.window.pool_blocks == SlidingWindowBlocks.pool_size(2, 8, 4, 16, engine.max_model_len) + 1 == 2 * 4 + 4 + 1
    windowed = [i for i, w in enumerate(engine.bundle.model.layer_windows()) if w is not None]
    assert all(runner.kv_caches[i][0].shape[1] == runner.window.pool_blocks for i in windowed)
    ids = smollm_tokenizer(PROMPTS["c"]).input_ids
    engine.add_request("long", ids, greedy(60))
    outputs = []
    while engine.has_work():
        outputs.extend(engine.step())
        assert window.pool.num_free >= window.pool.num_blocks - (8 // 4 + 2) - 16 // 4
    assert generated_ids(outputs) == hf_greedy(hf, ids, 60)
    assert window.pool.num_free == window.pool.num_blocks


def test_verified_guesses_and_forked_completions_read_the_window_pool(hf, smollm_tokenizer, expected):
    """Speculation's verify rows and n=2's copy of the prompt's partial last window block."""
    engine = engine_for(hf, smollm_tokenizer, block_size=4, speculative="ngram")
    engine.add_request("n2", smollm_tokenizer(PROMPTS["a"]).input_ids, greedy(20, n=2))
    results = run_to_completion(engine)["n2"]
    by_index = {}
    for out in results:
        by_index.setdefault(out.index, []).extend(out.token_ids)
    assert by_index == {0: expected["a"], 1: expected["a"]}
    assert engine.speculator.verification_steps > 0


def test_a_follow_up_turn_resumes_from_the_cached_window(hf, smollm_tokenizer, expected):
    """The next turn's prompt extends the last one's prompt and reply: it resumes at the reply's end."""
    engine = engine_for(hf, smollm_tokenizer, block_size=4)
    ids = smollm_tokenizer(PROMPTS["c"]).input_ids
    engine.add_request("turn1", ids, greedy(20))
    run_to_completion(engine)
    follow_up = ids + expected["c"] + smollm_tokenizer(" and then").input_ids
    engine.add_request("turn2", follow_up, greedy(12))
    seq = engine.requests["turn2"][0]
    outputs = run_to_completion(engine)["turn2"]
    assert seq.reported_cached_tokens == (len(ids) + 19) // 4 * 4  # every full block the last turn computed
    assert generated_ids(outputs) == hf_greedy(hf, follow_up, 12)
