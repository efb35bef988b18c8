"""Mixture-of-experts families against transformers' own classes (Qwen3MoeForCausalLM,
MixtralForCausalLM, OlmoeForCausalLM) on tiny random configs in float32: logits at 1e-4 and greedy
tokens, with batches whose rows choose different experts and steps where some experts get no row;
batched, chunked, preempted, speculated and prefix-cached runs give each request its tokens alone."""

from __future__ import annotations

import pytest
import torch

from inference.engine.layers.experts import SparseMoE
from inference.engine.models.mixtral import MixtralForCausalLM
from inference.engine.models.olmoe import OlmoeForCausalLM
from inference.engine.models.qwen3_moe import Qwen3MoeForCausalLM
from tests.conftest import TINY_COMMON, TINY_LLAMA_SHAPE, _peaked
from tests.support.engine_helpers import engine_for, generated_ids, greedy, hf_greedy, prefill_logits, run_to_completion

EXPERTS = dict(num_experts_per_tok=2)  # 2 of 8: a short prompt leaves some experts without a row


def tiny_qwen3_moe_hf(**overrides):
    """Layer 0 dense (mlp_only_layers), layer 1 sparse; per-head Q/K norms far from 1."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    shape = {**TINY_LLAMA_SHAPE, "num_hidden_layers": 3}
    cfg = Qwen3MoeConfig(
        **shape,
        **EXPERTS,
        **{"num_experts": 8, "moe_intermediate_size": 32, "norm_topk_prob": True, "head_dim": 32, "mlp_only_layers": [0]},
        tie_word_embeddings=False,
        **{**TINY_COMMON, **overrides},
    )
    model = _peaked(Qwen3MoeForCausalLM(cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                param.uniform_(0.5, 2.0)
    return model


def tiny_mixtral_hf():
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(**TINY_LLAMA_SHAPE, **EXPERTS, num_local_experts=8, tie_word_embeddings=False, **TINY_COMMON)
    return _peaked(MixtralForCausalLM(cfg))


def tiny_olmoe_hf():
    from transformers import OlmoeConfig, OlmoeForCausalLM

    cfg = OlmoeConfig(**TINY_LLAMA_SHAPE, **EXPERTS, num_experts=8, tie_word_embeddings=False, **TINY_COMMON)
    model = _peaked(OlmoeForCausalLM(cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                param.uniform_(0.5, 2.0)
    return model


FAMILIES = {
    "qwen3_moe": (tiny_qwen3_moe_hf, Qwen3MoeForCausalLM),
    "mixtral": (tiny_mixtral_hf, MixtralForCausalLM),
    "olmoe": (tiny_olmoe_hf, OlmoeForCausalLM),
}
PROMPTS = {
    "a": "The quick brown fox jumps over",
    "b": "one two",
    "c": "Once upon a time, in a land far away, there lived a",
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    make, cls = FAMILIES[request.param]
    return request.param, make(), cls


def test_logits_match_transformers(family, smollm_tokenizer):
    name, hf, cls = family
    engine = engine_for(hf, smollm_tokenizer)
    model = engine.bundle.model
    assert isinstance(model, cls) and engine.bundle.cpu_step is None
    assert "MoE, 2 of 8 experts" in engine.architecture
    ids = torch.randint(3, 49152, (40,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)


def test_rows_choose_different_experts_and_some_experts_get_none(family, smollm_tokenizer):
    """The routing these tests rest on: in one prefill the rows spread over several experts, and a
    one-token step leaves most of the 8 without a row."""
    _, hf, _ = family
    engine = engine_for(hf, smollm_tokenizer)
    sparse = [m for m in engine.bundle.model.modules() if isinstance(m, SparseMoE)][0]
    chosen = []
    hook = sparse.register_forward_hook(lambda module, args, out: chosen.append(torch.topk(module.gate(args[0]), 2).indices))
    try:
        prefill_logits(engine, smollm_tokenizer(PROMPTS["c"]).input_ids)
        prefill_logits(engine, smollm_tokenizer("one").input_ids)
    finally:
        hook.remove()
    assert len(set(chosen[0].flatten().tolist())) >= 4  # a prefill's rows route apart
    assert len(set(chosen[1].flatten().tolist())) <= 2  # one row reaches 2 of 8 experts


def test_greedy_tokens_alone_batched_and_chunked_are_transformers(family, smollm_tokenizer):
    """For each family (they share one MoE layer: the batching is the same code, but the routers differ)."""
    _, hf, _ = family
    expected = {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 12) for key, text in PROMPTS.items()}
    engine = engine_for(hf, smollm_tokenizer, block_size=4, max_num_batched_tokens=9)  # prompts split across steps
    for key, text in PROMPTS.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(12))
    batched = {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()}
    assert batched == expected
    alone = engine_for(hf, smollm_tokenizer, block_size=4)
    alone.add_request("c", smollm_tokenizer(PROMPTS["c"]).input_ids, greedy(12))
    assert generated_ids(run_to_completion(alone)["c"]) == expected["c"]


def test_preempted_speculated_and_prefix_cached_runs_keep_their_tokens(smollm_tokenizer):
    """Qwen3-MoE under a KV pool too small for the batch (preemption), with n-gram speculation
    (verified rows route like any row), and a second identical request served from the prefix cache."""
    hf = tiny_qwen3_moe_hf()
    expected = {key: hf_greedy(hf, smollm_tokenizer(text).input_ids, 16) for key, text in PROMPTS.items()}
    engine = engine_for(hf, smollm_tokenizer, block_size=4, num_kv_blocks=14, speculative="ngram")
    for key, text in PROMPTS.items():
        engine.add_request(key, smollm_tokenizer(text).input_ids, greedy(16))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == expected
    assert engine.scheduler.num_preemptions > 0
    engine.add_request("again", smollm_tokenizer(PROMPTS["c"]).input_ids, greedy(16))
    assert generated_ids(run_to_completion(engine)["again"]) == expected["c"]
    assert engine.stats().prefix_cache_hits > 0


@pytest.mark.real_model  # the embedded GGUF's tokenizer, written into the file
def test_a_gguf_moe_gives_each_request_its_tokens_alone_batched_chunked_preempted_and_speculated(tmp_path, monkeypatch):
    """The C++ expert path (k-quant experts read in place): a row's result never depends on the
    rows beside it, so a batch, chunked prompts, a KV pool that forces preemption and n-gram
    speculation all give each request the tokens it gets alone."""
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine
    from inference.engine.gguf import checkpoint as gguf_checkpoint
    from inference.engine.loader import load_model
    from tests.support.gguf_files import write_block_gguf

    monkeypatch.setattr(gguf_checkpoint, "CACHE_ROOT", tmp_path / "cache")
    path = write_block_gguf(tmp_path / "moe.gguf", "qwen3moe")
    bundle = load_model(EngineConfig(model=path, device="cpu"))
    assert bundle.model.layers[0].mlp.experts.gate_up.packed is not None

    def run(prompts, **config):
        engine = LLMEngine(EngineConfig(model=path, device="cpu", block_size=4, **config), bundle=bundle)
        for key, text in prompts.items():
            engine.add_request(key, engine.tokenize(text), greedy(12))
        return {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()}, engine

    alone = {key: run({key: text}, speculative="off")[0][key] for key, text in PROMPTS.items()}
    assert run(PROMPTS, speculative="off", max_num_batched_tokens=9)[0] == alone
    tokens, tight = run(PROMPTS, speculative="ngram", num_kv_blocks=8)
    assert tokens == alone and tight.scheduler.num_preemptions > 0
