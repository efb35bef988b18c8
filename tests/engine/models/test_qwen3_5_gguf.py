"""Qwen3.5 read in place from GGUFs written by llama.cpp's own converter (tests/support/llama_convert.py):
the tensors as llama.cpp lays them out (norms stored shifted, -exp(A_log) as `ssm_a`, value heads
tiled, q_proj whole) compute what transformers computes from the folder they were converted from,
and the same file quantized by llama-quantize runs through our block kernels and agrees with
llama-server's greedy tokens (where llama.cpp is built: `make bench` builds it)."""

from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from tests.support.engine_helpers import generated_ids, greedy, hf_greedy, prefill_logits, run_to_completion
from tests.support.llama_convert import convert_to_gguf, quantize, quantizer_path, tiny_qwen35_folder

PROMPTS = ["The quick brown fox jumps over", "one two", "Once upon a time, in a land far away, there lived a"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(the HF folder, transformers' model of it, our engine on its f32 GGUF)."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("qwen35")
    folder = tiny_qwen35_folder(root / "hf")
    path = convert_to_gguf(folder, root / "tiny-f32.gguf", extra_args=("--no-mtp",))
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    engine = LLMEngine(EngineConfig(model=str(path), device="cpu", block_size=4, max_num_batched_tokens=9))
    return folder, hf, engine


def test_a_converted_file_is_the_hybrid(converted):
    _, _, engine = converted
    assert "hybrid: 3 Gated DeltaNet + 1 attention layers" in engine.architecture
    deltanet = engine.bundle.model.layers[0].linear_attn
    assert deltanet.num_v_heads == 2 * deltanet.num_k_heads  # so the order of the value heads matters
    from inference.engine.engine_stats import EngineStats

    stats = EngineStats.of(engine)  # /stats: the state rows' share of the pools, apart
    assert 0 < stats.state_pool_mb < stats.kv_pool_mb


def test_logits_match_transformers_on_the_folder_it_was_converted_from(converted):
    _, hf, engine = converted
    ids = torch.randint(3, 49152, (100,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference = hf(ids[None]).logits[0]
    torch.testing.assert_close(prefill_logits(engine, ids), reference, atol=1e-4, rtol=0)


def test_greedy_tokens_batched_and_chunked_are_transformers(converted):
    _, hf, engine = converted
    prompts = {str(i): engine.tokenize(text) for i, text in enumerate(PROMPTS)}
    for key, ids in prompts.items():
        engine.add_request(key, ids, greedy(12))
    got = {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()}
    assert got == {key: hf_greedy(hf, ids, 12) for key, ids in prompts.items()}


def test_the_folder_itself_loads_to_the_same_tokens(converted):
    folder, hf, _ = converted
    engine = LLMEngine(EngineConfig(model=str(folder), device="cpu", dtype="float32"))
    ids = engine.tokenize(PROMPTS[2])
    engine.add_request("c", ids, greedy(12))
    assert generated_ids(run_to_completion(engine)["c"]) == hf_greedy(hf, ids, 12)


@pytest.mark.skipif(quantizer_path() is None, reason="llama.cpp's llama-quantize is not built here (`make llama-cpp` builds it)")
def test_a_k_quant_file_runs_the_block_kernels_and_agrees_with_llama_server(tmp_path):
    """A model wide enough for k-quant blocks (256 columns), Q4_K_M by llama-quantize: its matrices
    run through our block kernels, and our greedy tokens are llama-server's on the same file."""
    from tests.support.llama_convert import llama_server_greedy

    folder = tiny_qwen35_folder(
        tmp_path / "hf", hidden_size=256, intermediate_size=512, head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64
    )
    f32 = convert_to_gguf(folder, tmp_path / "wide-f32.gguf", extra_args=("--no-mtp",))
    path = quantize(f32, tmp_path / "wide-q4_k_m.gguf", "Q4_K_M")
    engine = LLMEngine(EngineConfig(model=str(path), device="cpu"))
    assert "Q4_K" in engine.weights and engine.bundle.model.layers[0].linear_attn.tiled_heads  # read in place
    ids = engine.tokenize(PROMPTS[2])
    engine.add_request("c", ids, greedy(16))
    ours = generated_ids(run_to_completion(engine)["c"])
    theirs = llama_server_greedy(path, ids, 16)
    if theirs is None:
        pytest.skip("llama.cpp's llama-server is not built here (`make llama-cpp` builds it)")
    assert ours == theirs
