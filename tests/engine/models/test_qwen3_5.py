"""Qwen3.5, the hybrid (three Gated DeltaNet layers to one gated attention layer), against
transformers' own Qwen3_5ForCausalLM on a tiny random config in float32: logits at 1e-4 over a
prompt longer than the DeltaNet's 64-token chunk, and greedy tokens through every engine feature
that touches the recurrent state: batching, chunked prefill (the state carried between chunks),
preemption (recomputed), forks (n=2: the state copied), prefix caching (state checkpoints) and
n-gram speculation (a rejected guess leaves the state as if it had never been computed)."""

from __future__ import annotations

import pytest
import torch

from inference.engine.kv_cache.recurrent_state import RecurrentStateSlots
from inference.engine.models.qwen3_5 import Qwen35ForCausalLM
from tests.conftest import TINY_COMMON, _peaked
from tests.support.engine_helpers import (
    engine_for,
    generated_ids,
    greedy,
    hf_greedy,
    prefill_logits,
    run_to_completion,
    without_cpu_kernels,
)

SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,  # layers 0-2 Gated DeltaNet, layer 3 gated attention
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,  # each key head serves two value heads
    linear_key_head_dim=16,
    linear_value_head_dim=24,
    linear_conv_kernel_dim=4,
)
PROMPTS = {
    "a": "The quick brown fox jumps over",
    "b": "one two",
    "c": "Once upon a time, in a land far away, there lived a",
}


def tiny_qwen35_hf(**overrides):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(**SHAPE, tie_word_embeddings=False, **{**TINY_COMMON, **overrides})
    model = _peaked(Qwen3_5ForCausalLM(cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") and "linear_attn" not in name:
                param.uniform_(-0.3, 0.3)  # 1 + weight norms away from 1
            elif name.endswith(("linear_attn.norm.weight", "dt_bias")):
                param.uniform_(0.5, 1.5)
            elif name.endswith("A_log"):
                param.uniform_(-2.0, 1.0)  # decays from slow to fast
    return model.eval()


@pytest.fixture(scope="module")
def hf():
    return tiny_qwen35_hf()


def test_the_layout_is_the_hybrids(hf, smollm_tokenizer):
    engine = engine_for(hf, smollm_tokenizer)
    assert isinstance(engine.bundle.model, Qwen35ForCausalLM)
    assert engine.architecture.startswith("qwen3_5_text, hybrid: 3 Gated DeltaNet + 1 attention layers, state")
    assert isinstance(engine.kv_cache.state, RecurrentStateSlots)
    assert engine.model_runner.layer_kinds == ["state", "state", "state", "full"]
    conv, recurrent = engine.model_runner.kv_caches[0]
    rows = 2 * engine.num_slots  # running slots, then as many prefix checkpoints
    assert conv.shape == (rows, 3, 2 * 2 * 16 + 4 * 24) and recurrent.shape == (rows, 4, 16, 24)
    assert recurrent.dtype == torch.float32


def test_logits_match_transformers_across_the_deltanets_chunks(hf, smollm_tokenizer):
    engine = engine_for(hf, smollm_tokenizer)
    ids = torch.randint(3, 49152, (150,), generator=torch.Generator().manual_seed(1))  # three 64-token chunks
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)


def test_greedy_tokens_alone_batched_and_chunked_are_transformers(hf, smollm_tokenizer):
    expected = {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 12) for key, text in PROMPTS.items()}
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=5)  # prompts split across steps
    for key, text in PROMPTS.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(12))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == expected
    alone = engine_for(hf, smollm_tokenizer, block_size=4)
    alone.add_request("c", smollm_tokenizer(PROMPTS["c"]).input_ids, greedy(12))
    assert generated_ids(run_to_completion(alone)["c"]) == expected["c"]


@pytest.fixture(params=["cpp", "torch"])
def kernels_bound(request):
    """Whether engines built in the test bind the C++ kernels (CPU float32's path) or none (the torch
    forms of the DeltaNet's steps, convolution and verifications: CUDA's path)."""
    if request.param == "cpp":
        yield True
        return
    with without_cpu_kernels():
        yield False


def test_preempted_forked_and_speculating_requests_keep_their_tokens(hf, smollm_tokenizer, kernels_bound):
    """A pool too small for the batch (a preempted sequence recomputes its state), n=2 (the fork
    copies its parent's state: both completions go on from the prompt's), and n-gram speculation
    on a prompt that repeats (guesses made, some accepted, some rejected); with the C++ kernels and
    with the torch forms."""
    expected = {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 16) for key, text in PROMPTS.items()}
    engine = engine_for(hf, smollm_tokenizer, block_size=4, num_kv_blocks=14, speculative="ngram")
    assert (engine.bundle.model.layers[0].linear_attn._cpp is not None) == kernels_bound
    for key, text in PROMPTS.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(16))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == expected
    assert engine.scheduler.num_preemptions > 0
    assert engine.kv_cache.state.num_free == engine.num_slots  # every slot given back
    prompt = smollm_tokenizer(PROMPTS["a"]).input_ids
    reply = hf_greedy(hf, prompt, 20)
    edited = reply[:6] + [reply[6] + 1] + reply[7:]  # a prediction right but for one token: guesses accepted, then one rejected
    engine.add_request("predicted", prompt, greedy(20, prediction=edited))
    outs = run_to_completion(engine)["predicted"]
    assert generated_ids(outs) == reply
    counts = outs[-1].prediction_draft_tokens, outs[-1].prediction_accepted_tokens
    assert counts[1] > 6 and counts[0] > counts[1], counts
    engine.add_request("n2", smollm_tokenizer(PROMPTS["c"]).input_ids, greedy(16, n=2))
    outputs = run_to_completion(engine)["n2"]
    by_index = {index: [t for out in outputs if out.index == index for t in out.token_ids] for index in (0, 1)}
    assert by_index == {0: expected["c"], 1: expected["c"]}


def test_the_text_part_of_a_conditional_generation_checkpoint_loads(hf, smollm_tokenizer):
    """Qwen3_5ForConditionalGeneration keeps the language model under model.language_model. and a
    vision tower beside it: the text model's weights load, the vision tower's are left out."""
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine
    from inference.engine.loader import build_bundle

    state = {name.replace("model.", "model.language_model.", 1): t for name, t in hf.state_dict().items()}
    state["model.visual.blocks.0.attn.qkv.weight"] = torch.zeros(3, 3)
    cfg = EngineConfig(dtype="float32", device="cpu")
    engine = LLMEngine(cfg, bundle=build_bundle(hf.config, smollm_tokenizer, state, name="vl", config=cfg))
    ids = smollm_tokenizer(PROMPTS["a"]).input_ids
    engine.add_request("a", ids, greedy(8))
    assert generated_ids(run_to_completion(engine)["a"]) == hf_greedy(hf, ids, 8)


def test_a_repeated_prefix_resumes_from_a_state_checkpoint(hf, smollm_tokenizer):
    """The first request keeps its state at its prompt's last block boundary; the same prompt again,
    and a next turn that extends it, resume from there (cached_tokens says how far) and generate
    what transformers does from the whole prompt."""
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=7)
    first = smollm_tokenizer(PROMPTS["c"]).input_ids  # 13 tokens: its checkpoint after 12
    engine.add_request("first", first, greedy(6))
    outs = run_to_completion(engine)["first"]
    assert generated_ids(outs) == hf_greedy(hf, first, 6) and outs[-1].num_cached_tokens == 0
    engine.add_request("again", first, greedy(6))
    outs = run_to_completion(engine)["again"]
    assert generated_ids(outs) == hf_greedy(hf, first, 6) and outs[-1].num_cached_tokens == 12
    follow_up = first + generated_ids(outs) + smollm_tokenizer(" and then").input_ids
    engine.add_request("next", follow_up, greedy(6))
    outs = run_to_completion(engine)["next"]
    assert generated_ids(outs) == hf_greedy(hf, follow_up, 6) and outs[-1].num_cached_tokens == 12
    unrelated = smollm_tokenizer(PROMPTS["a"]).input_ids
    engine.add_request("other", unrelated, greedy(6))
    outs = run_to_completion(engine)["other"]
    assert generated_ids(outs) == hf_greedy(hf, unrelated, 6) and outs[-1].num_cached_tokens == 0
    state = engine.kv_cache.state  # everything given back: slots free, checkpoints held by nobody
    assert state.num_free == engine.num_slots and all(row.ref_count == 0 for row in state.checkpoints.blocks)
    assert state.pending == [] and state.replays == []


def test_a_resumed_request_and_a_json_schema_run_on_the_hybrid(hf, smollm_tokenizer):
    """Resume after an engine died (the delivered tokens replayed into a new sequence, its state
    recomputed from the prompt and them), and a grammar-constrained reply: both as on any model."""
    import json

    from inference.engine.sample.sampling_params import SamplingParams

    ids = smollm_tokenizer(PROMPTS["c"]).input_ids
    expected = hf_greedy(hf, ids, 16)
    engine = engine_for(hf, smollm_tokenizer)
    engine.add_request("r", ids, greedy(16), resume=[expected[:7]])
    assert generated_ids(run_to_completion(engine)["r"]) == expected[7:]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    params = SamplingParams(temperature=0.0, max_tokens=40, structured={"kind": "json_schema", "value": schema})
    engine.add_request("json", ids, params)
    text = "".join(out.text for out in run_to_completion(engine)["json"])
    assert isinstance(json.loads(text)["n"], int)


def test_requests_behind_one_system_prompt_resume_from_a_checkpoint_inside_it(hf, smollm_tokenizer, monkeypatch):
    """The agent case: requests sharing a long system prompt, each with its own question. The first
    keeps checkpoints along its prefill (every 8 tokens here), a chunk passing several of them; the
    next resumes from the last one inside the shared part and generates transformers' tokens."""
    from inference.engine.kv_cache import recurrent_state

    monkeypatch.setattr(recurrent_state, "CHECKPOINT_EVERY", 8)
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=20)
    system = smollm_tokenizer(
        "You are a careful assistant. Answer briefly, in plain words, and cite the tools you use."
    ).input_ids
    assert 16 < len(system) < 24
    for key, question in (("first", " What is the capital of France?"), ("second", " How tall is Everest?")):
        ids = system + smollm_tokenizer(question).input_ids
        engine.add_request(key, ids, greedy(6))
        outs = run_to_completion(engine)[key]
        assert generated_ids(outs) == hf_greedy(hf, ids, 6)
    assert outs[-1].num_cached_tokens == 16  # the second: from the checkpoint at 16, inside the shared 16+ tokens
