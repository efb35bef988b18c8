"""Every published size of Qwen3.5 and Gemma 4, as llama.cpp's converter writes it (issue 65): each
config as published, shrunk in width and depth only (tests/support/published_models.py), saved by
transformers with random weights and converted to an F32 GGUF (converted once and cached).

From the file and from the folder, ours computes transformers' logits (float32, 1e-4) over a prompt
longer than the sliding window, and its greedy tokens batched and chunked, again from the prefix
cache, preempted, forked and resumed. llama-server on the same file is held to transformers by the file's own float32 arithmetic:
these random models' next-token distributions are flat (logits' spread ~0.16 over 262k tokens), so
where llama-server parts from transformers, transformers must rank its token among its first few
(llama.cpp keeps K/V in float16). Gemma 4's Q/K norm weights are softened (published_models.py):
at random weights near 1 its unscaled attention is sharp enough that float32's own rounding moves
the logits by 1e-3, and llama-server's float16 K/V then picked tokens transformers ranked 82nd.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from tests.support.engine_helpers import generated_ids, greedy, hf_greedy, prefill_logits, run_to_completion
from tests.support.llama_convert import llama_server_greedies
from tests.support.published_models import NAMES, convert, save_folder

PROMPTS = [
    "The quick brown fox jumps over",
    "one two",
    "Once upon a time, in a land far away, there lived a",
    "Hello, my name is",
]
TOKENS = 8
LAST = 64  # positions whose logits are compared
TOP = 5  # where llama-server parts, transformers ranks its token among its first TOP (most partings: 2nd, by ~0.001)


@dataclass
class Published:
    name: str
    folder: Path  # what transformers saved
    hf: object  # transformers' model of it
    path: Path  # the converter's F32 file
    engine: LLMEngine  # ours on the file
    prompts: dict[str, list[int]]  # PROMPTS' ids, by index
    expected: dict[str, list[int]]  # transformers' greedy tokens after each


@pytest.fixture(scope="module", params=NAMES)
def published(request, tmp_path_factory) -> Published:
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp(request.param)
    folder = save_folder(request.param, root / "hf")
    path = convert(folder, root / "f32.gguf")
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    engine = LLMEngine(EngineConfig(model=str(path), block_size=4, max_num_batched_tokens=9, **EXACT))
    prompts = {str(i): engine.tokenize(text) for i, text in enumerate(PROMPTS)}
    expected = {key: hf_greedy(hf, ids, TOKENS) for key, ids in prompts.items()}
    return Published(request.param, folder, hf, path, engine, prompts, expected)


EXACT = dict(device="cpu", max_model_len=2048, kv_cache_dtype="float32")  # float32 throughout, as transformers


def test_logits_past_the_window_are_transformers_from_the_file_and_the_folder(published):
    """The last LAST positions' logits (the output layer over 262k tokens is most of the time here),
    which reach past the window where the model has one."""
    window = getattr(published.hf.config, "sliding_window", None) or 0
    ids = torch.randint(3, 100_000, (window + 40 or 96,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = published.hf(ids[None], logits_to_keep=LAST).logits[0]
    torch.testing.assert_close(prefill_logits(published.engine, ids, last=LAST), reference, atol=1e-4, rtol=1e-4)
    from_folder = LLMEngine(EngineConfig(model=str(published.folder), dtype="float32", **EXACT))
    torch.testing.assert_close(prefill_logits(from_folder, ids, last=LAST), reference, atol=1e-4, rtol=1e-4)


def test_greedy_tokens_batched_chunked_and_prefix_cached_are_transformers(published):
    engine = published.engine
    for key, ids in published.prompts.items():
        engine.add_request(key, ids, greedy(TOKENS))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == published.expected
    for key, ids in published.prompts.items():  # again: full blocks (and a hybrid's state checkpoints) from the cache
        engine.add_request("again" + key, ids, greedy(TOKENS))
    again = {key.removeprefix("again"): generated_ids(outs) for key, outs in run_to_completion(engine).items()}
    assert again == published.expected


def test_preempted_forked_and_resumed_requests_keep_transformers_tokens(published):
    """A pool too small for the batch (preempted sequences recompute their K/V and state), n=2 (a
    fork copies its parent's cache), and a request resumed after its engine died (its delivered
    tokens replayed)."""
    engine = LLMEngine(EngineConfig(model=str(published.path), block_size=4, num_kv_blocks=12, **EXACT))
    for key, ids in published.prompts.items():
        engine.add_request(key, ids, greedy(TOKENS))
    assert {key: generated_ids(outs) for key, outs in run_to_completion(engine).items()} == published.expected
    assert engine.scheduler.num_preemptions > 0
    ids, expected = published.prompts["2"], published.expected["2"]
    engine.add_request("n2", ids, greedy(TOKENS, n=2))
    outputs = run_to_completion(engine)["n2"]
    assert {i: [t for out in outputs if out.index == i for t in out.token_ids] for i in (0, 1)} == {0: expected, 1: expected}
    engine.add_request("resumed", ids, greedy(TOKENS), resume=[expected[:3]])
    assert generated_ids(run_to_completion(engine)["resumed"]) == expected[3:]


def test_llama_server_on_the_same_file_parts_from_transformers_only_at_near_ties(published):
    answers = llama_server_greedies(published.path, list(published.prompts.values()), TOKENS)
    if answers is None:
        pytest.skip("llama.cpp's llama-server is not built here (`make llama-cpp` builds it)")
    ranks = []  # where they part, how many tokens transformers ranks above llama-server's
    for (key, ids), theirs in zip(published.prompts.items(), answers):
        ours = published.expected[key]
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        if at is not None:
            with torch.no_grad():
                logits = published.hf(torch.tensor([ids + ours[:at]])).logits[0, -1]
            ranks.append(int((logits > logits[theirs[at]]).sum()))
    assert max(ranks, default=0) < TOP, (published.name, ranks)


K_QUANT_SIZES = ["qwen3.5-9b", "qwen3.5-35b-a3b", "gemma-4-e2b", "gemma-4-26b-a4b"]  # each layout once: dense, experts


@pytest.mark.parametrize("name", K_QUANT_SIZES)
def test_a_q4_k_m_file_runs_in_place_and_parts_from_llama_server_only_at_near_ties(name, tmp_path):
    """The same sizes 256 wide (k-quant blocks need 256 columns), Q4_K_M by llama-quantize: our block
    kernels read its matrices in place; where llama-server's greedy tokens part from ours, the file's
    weights in float32 (ours de-quantized, MINIVLLM_QUANT=none) rank both tokens among their first
    TOP: each server rounds its activations to int8 its own way before the blocks."""
    from tests.support.llama_convert import quantize, quantizer_path

    if quantizer_path() is None:
        pytest.skip("llama.cpp's llama-quantize is not built here (`make llama-cpp` builds it)")
    path = quantize(convert(save_folder(name, tmp_path / "hf", hidden=256), tmp_path / "f32.gguf"), tmp_path / "q.gguf", "Q4_K_M")
    blocks = LLMEngine(EngineConfig(model=str(path), device="cpu", max_model_len=2048))
    assert "Q4_K" in blocks.weights
    prompts = [blocks.tokenize(text) for text in PROMPTS]
    ours = []
    for i, ids in enumerate(prompts):
        blocks.add_request(str(i), ids, greedy(TOKENS))
    ours = [generated_ids(outs) for _, outs in sorted(run_to_completion(blocks).items())]
    answers = llama_server_greedies(path, prompts, TOKENS)
    if answers is None:
        pytest.skip("llama.cpp's llama-server is not built here (`make llama-cpp` builds it)")
    exact = LLMEngine(EngineConfig(model=str(path), quantization="none", **EXACT))
    for ids, mine, theirs in zip(prompts, ours, answers):
        at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
        if at is not None:
            logits = prefill_logits(exact, ids + mine[:at])[-1]
            ranks = [int((logits > logits[token]).sum()) for token in (mine[at], theirs[at])]
            assert max(ranks) < TOP, (name, at, ranks)
