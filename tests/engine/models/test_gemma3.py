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
    assert tight.block_manager.num_free_blocks == tight.block_manager.num_blocks


def test_a_prefix_cached_prompt_gives_the_same_tokens(hf, smollm_tokenizer, expected):
    """The second run reads the first's blocks for its shared prefix, windowed layers included."""
    engine = engine_for(hf, smollm_tokenizer, block_size=4)
    ids = smollm_tokenizer(PROMPTS["c"]).input_ids
    for key in ("first", "second"):
        engine.add_request(key, ids, greedy(20))
        assert generated_ids(run_to_completion(engine)[key]) == expected["c"]
    assert engine.block_manager.prefix_hits > 0


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
