"""Gemma 4 against transformers' own Gemma4ForCausalLM on tiny random configs in float32: the E2B
layout (sliding and full layers with their own head widths, KV-shared layers, per-layer inputs, the
double-wide MLP, soft-capped logits), the 31B one (attention_k_eq_v, its own full-layer KV heads) and
the 26B-A4B one (the MoE block). Logits at 1e-4 over prompts longer than the window, and greedy tokens
through every engine feature: batching, chunked prefill, preemption, forks, prefix caching,
speculation, resume and grammars, with the KV-shared layers reading their source layer's cache."""

from __future__ import annotations

import pytest
import torch

from inference.engine.kv_cache.block_pool import FULL, WINDOW
from inference.engine.models.gemma4 import Gemma4ForCausalLM, kv_sources_of
from tests.conftest import TINY_COMMON, _peaked
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, prefill_logits, run_to_completion

E2B_LIKE = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    layer_types=["sliding_attention"] * 3 + ["full_attention", "sliding_attention", "full_attention"],
    num_kv_shared_layers=2,  # layers 4 and 5 read layers 2 and 3
    sliding_window=8,
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=49152,
    use_double_wide_mlp=True,
    final_logit_softcapping=30.0,
)
LARGE_LIKE = dict(  # the 31B's attention: V is K's projection on full layers, which have 1 KV head
    E2B_LIKE,
    num_kv_shared_layers=0,
    hidden_size_per_layer_input=0,
    use_double_wide_mlp=False,
    attention_k_eq_v=True,
    num_global_key_value_heads=1,
)
MOE_LIKE = dict(LARGE_LIKE, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32)
PROMPTS = {
    "a": "The quick brown fox jumps over",
    "b": "one two",
    "c": "Once upon a time, in a land far away, there lived a",
}


def tiny_gemma4_hf(shape: dict):
    from transformers import Gemma4ForCausalLM as HFGemma4
    from transformers import Gemma4TextConfig

    model = _peaked(HFGemma4(Gemma4TextConfig(**{**TINY_COMMON, **shape})))
    with torch.no_grad():  # norms, layer scalars and the router's scales away from 1
        for tensor in model.state_dict().values():
            if tensor.ndim == 1 and tensor.is_floating_point():
                tensor.uniform_(0.6, 1.4)
    return model.eval()


@pytest.fixture(scope="module")
def hf():
    return tiny_gemma4_hf(E2B_LIKE)


def test_shared_layers_read_their_sources_cache_and_each_kind_keeps_its_own_heads(hf, smollm_tokenizer):
    engine = engine_for(hf, smollm_tokenizer, block_size=4)
    model, runner = engine.bundle.model, engine.model_runner
    assert isinstance(model, Gemma4ForCausalLM) and model.kv_sources() == [0, 1, 2, 3, 2, 3]
    assert engine.architecture == "gemma4_text, sliding window 8 ×4/6, 2 layers share KV, per-layer inputs 8"
    caches = runner.kv_caches
    assert caches[4][0] is caches[2][0] and caches[5][1] is caches[3][1]  # the very tensors: no copy, no pool of their own
    assert caches[0][0].shape[0] == 2 and caches[0][0].shape[-1] == 16  # sliding: 2 KV heads of 16
    assert caches[3][0].shape[0] == 2 and caches[3][0].shape[-1] == 32  # full: 2 KV heads of 32
    assert runner.kv_pool_bytes == sum(k.nbytes + v.nbytes for k, v in (caches[i] for i in range(4)))
    assert model.layers[5].mlp.intermediate == 2 * model.layers[3].mlp.intermediate  # double-wide on shared layers


def test_kv_sources_follow_the_last_unshared_layer_of_each_type():
    types = ["s", "s", "f", "s", "f", "s", "f"]
    assert kv_sources_of(types, 3) == [0, 1, 2, 3, 2, 3, 2]
    assert kv_sources_of(types, 0) == list(range(7))
    with pytest.raises(ValueError, match="no earlier layer of its type"):
        kv_sources_of(["s", "f", "f"], 2)


@pytest.mark.parametrize("shape", [E2B_LIKE, LARGE_LIKE, MOE_LIKE], ids=["e2b", "k_eq_v", "moe"])
def test_logits_match_transformers_past_the_window(shape, smollm_tokenizer):
    hf = tiny_gemma4_hf(shape)
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=16)  # chunked too
    ids = torch.randint(3, 49152, (40,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)


def test_greedy_tokens_alone_batched_and_chunked_are_transformers(hf, smollm_tokenizer):
    expected = {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 14) for key, text in PROMPTS.items()}
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=5)
    for key, text in PROMPTS.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(14))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == expected
    alone = engine_for(hf, smollm_tokenizer, block_size=4)
    alone.add_request("c", smollm_tokenizer(PROMPTS["c"]).input_ids, greedy(14))
    assert generated_ids(run_to_completion(alone)["c"]) == expected["c"]


def test_preempted_forked_speculating_and_prefix_cached_requests_keep_their_tokens(hf, smollm_tokenizer):
    expected = {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 16) for key, text in PROMPTS.items()}
    engine = engine_for(hf, smollm_tokenizer, block_size=4, num_kv_blocks=12, speculative="ngram")
    for key, text in PROMPTS.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(16))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == expected
    assert engine.scheduler.num_preemptions > 0
    prompt = smollm_tokenizer(PROMPTS["a"]).input_ids
    reply = hf_greedy(hf, prompt, 20)
    edited = reply[:6] + [reply[6] + 1] + reply[7:]  # guesses accepted, then one rejected
    engine.add_request("predicted", prompt, greedy(20, prediction=edited))
    outs = run_to_completion(engine)["predicted"]
    assert generated_ids(outs) == reply
    assert outs[-1].prediction_accepted_tokens > 6
    engine.add_request("n2", smollm_tokenizer(PROMPTS["c"]).input_ids, greedy(16, n=2))
    outputs = run_to_completion(engine)["n2"]
    by_index = {index: [t for out in outputs if out.index == index for t in out.token_ids] for index in (0, 1)}
    assert by_index == {0: expected["c"], 1: expected["c"]}
    follow_up = smollm_tokenizer(PROMPTS["c"]).input_ids + expected["c"] + smollm_tokenizer(" and then").input_ids
    engine.add_request("next", follow_up, greedy(8))
    outs = run_to_completion(engine)["next"]
    assert generated_ids(outs) == hf_greedy(hf, follow_up, 8) and outs[-1].num_cached_tokens >= 12


def test_a_resumed_request_and_a_json_schema(hf, smollm_tokenizer):
    import json

    from inference.engine.sample.sampling_params import SamplingParams

    ids = smollm_tokenizer(PROMPTS["c"]).input_ids
    expected = hf_greedy(hf, ids, 16)
    engine = engine_for(hf, smollm_tokenizer)
    engine.add_request("r", ids, greedy(16), resume=[expected[:7]])
    assert generated_ids(run_to_completion(engine)["r"]) == expected[7:]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    engine.add_request(
        "json", ids, SamplingParams(temperature=0.0, max_tokens=40, structured={"kind": "json_schema", "value": schema})
    )
    assert isinstance(json.loads("".join(out.text for out in run_to_completion(engine)["json"]))["n"], int)


def test_the_text_part_of_a_conditional_generation_checkpoint_loads(hf, smollm_tokenizer):
    """Gemma4ForConditionalGeneration keeps the language model under model.language_model. beside
    the vision and audio towers: the text model's weights load, the towers' are left out."""
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine
    from inference.engine.loader import build_bundle

    state = {name.replace("model.", "model.language_model.", 1): t for name, t in hf.state_dict().items()}
    state["model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight"] = torch.zeros(3, 3)
    state["model.embed_audio.embedding_projection.weight"] = torch.zeros(3, 3)
    cfg = EngineConfig(dtype="float32", device="cpu")
    engine = LLMEngine(cfg, bundle=build_bundle(hf.config, smollm_tokenizer, state, name="vl", config=cfg))
    ids = smollm_tokenizer(PROMPTS["a"]).input_ids
    engine.add_request("a", ids, greedy(8))
    assert generated_ids(run_to_completion(engine)["a"]) == hf_greedy(hf, ids, 8)


def test_the_kv_plan_counts_only_the_layers_that_write(hf, smollm_tokenizer):
    from inference.engine.kv_cache.layout import kind_head_shape, writer_counts
    from inference.engine.kv_cache.memory_plan import split_kv_shape

    model = engine_for(hf, smollm_tokenizer).bundle.model
    assert writer_counts(model) == {WINDOW: 3, FULL: 1}  # of 4 sliding and 2 full layers
    assert (kind_head_shape(model, WINDOW), kind_head_shape(model, FULL)) == ((2, 16), (2, 32))
    assert split_kv_shape(model) == ((1, 2, 32), (3, 2, 16))


def test_a_config_read_back_from_json_keeps_each_layers_heads():
    """A GGUF's config is read back from JSON (gguf/checkpoint.py): `per_layer_config` is then a plain
    dict whose keys transformers zero-pads from 10 layers on ("04"), and each layer keeps its shape."""
    from types import SimpleNamespace

    from inference.engine.models.gemma4 import layer_shape

    saved = SimpleNamespace(
        num_key_value_heads=1, head_dim=256, per_layer_config={"04": {"head_dim": 512}, "34": {"head_dim": 512}}
    )
    assert [layer_shape(saved, i) for i in (3, 4, 33, 34)] == [(1, 256), (1, 512), (1, 256), (1, 512)]
