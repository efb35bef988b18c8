"""The device-generic torch path, the one CUDA takes, run on the CPU: MINIVLLM_CPU_KERNELS=0 binds
no C++ kernel and keeps plain nn.Linear weights, its greedy tokens are HF's, in float32 and in
bfloat16 (against HF in the same dtype), batched, and a GGUF loads as CUDA loads it: our reader,
each tensor de-quantized by torch on the device, to exactly transformers' values."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from inference.engine import loader
from inference.engine.config import EngineConfig
from inference.engine.device import dtype_name
from inference.engine.engine import LLMEngine
from inference.engine.kernels import kernels
from inference.engine.layers.norm import RMSNorm
from inference.engine.sample.sampling_params import SamplingParams
from tests.support.engine_helpers import generated_ids, greedy, run_to_completion, without_cpu_kernels
from tests.support.host_syncs import HostSyncCounter

PROMPTS = ["The future of AI inference is", "def fibonacci(n):", "Paris is the capital of", "Water boils at a temperature of"]


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def torch_path(request, real_hf_model, smollm_tokenizer):
    """(engine on the torch path, HF reference in the same dtype)."""
    dtype = request.param
    config = EngineConfig(dtype=dtype, device="cpu", kv_cache_mb=32)
    with without_cpu_kernels():
        assert kernels() is None
        bundle = loader.build_bundle(
            real_hf_model.config, smollm_tokenizer, real_hf_model.state_dict(), name="torch-path", config=config
        )
        engine = LLMEngine(config, bundle=bundle)
    reference = real_hf_model if dtype == "float32" else copy.deepcopy(real_hf_model).to(getattr(torch, dtype))
    return engine, reference


def test_no_cpu_kernel_is_bound_and_the_linears_are_plain(torch_path):
    engine, _ = torch_path
    model = engine.bundle.model
    assert engine.bundle.cpu_step is None and engine.model_runner.decode_kernels is None
    assert engine.bundle.weights_format == "none"
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is nn.Linear for m in linears)
    norms = [m for m in model.modules() if isinstance(m, RMSNorm)]
    assert norms and all(m._cpp is None for m in norms)


BF16_TIE = 0.25  # logits this close are a tie in bfloat16 (its step at HF's logit sizes is 0.06-0.125)


@torch.no_grad()
def worse_than_hfs_best(reference, prompt_ids: list[int], generated: list[int]) -> list[float]:
    """Teacher-forced on our tokens: at each generated position, how far our token's logit falls
    short of HF's best there (0 where it is HF's choice)."""
    logits = reference(torch.tensor([prompt_ids + generated])).logits[0, len(prompt_ids) - 1 : -1].float()
    chosen = logits.gather(1, torch.tensor(generated)[:, None])[:, 0]
    return (logits.max(1).values - chosen).tolist()


def test_batched_greedy_tokens_are_hfs(torch_path, smollm_tokenizer):
    """float32: every token is HF's choice after the same tokens, so the replies are HF's greedy
    replies exactly. bfloat16, where HF and we round in other places: HF's choice or within a
    bfloat16 tie of it."""
    engine, reference = torch_path
    prompts = [smollm_tokenizer(p).input_ids for p in PROMPTS]
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{i}", ids, greedy(10))
    results = run_to_completion(engine)
    for i, ids in enumerate(prompts):
        tie = 0.0 if reference.dtype == torch.float32 else BF16_TIE
        assert max(worse_than_hfs_best(reference, ids, generated_ids(results[f"r{i}"]))) <= tie, PROMPTS[i]
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks


STEP_PARAMS = {
    "greedy": greedy(6),
    "sampled": SamplingParams(
        max_tokens=6, temperature=0.8, top_k=40, top_p=0.9, min_p=0.01, repetition_penalty=1.1, frequency_penalty=0.2, seed=7
    ),
    "logprobs": SamplingParams(max_tokens=6, temperature=0.7, top_k=20, logprobs=3, logit_bias={11: -2.0}),
    "n=2": SamplingParams(max_tokens=6, temperature=0.9, top_k=50, n=2),
}


@pytest.mark.parametrize("kind", sorted(STEP_PARAMS))
def test_a_step_waits_for_the_device_once(torch_path, smollm_tokenizer, kind):
    """Every step of a batch (its prefill, then decodes) brings the sampled tokens, and logprobs
    where asked, to the host in one transfer, and makes no other call that would stall a GPU."""
    engine, _ = torch_path
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"sync-{kind}-{i}", smollm_tokenizer(prompt).input_ids, STEP_PARAMS[kind])
    steps = []
    while engine.has_work():
        with HostSyncCounter() as syncs:
            outputs = engine.step()
        steps.append(syncs.events)
        assert not any(out.error for out in outputs)
    assert len(steps) >= 6 and all(events == ["tolist"] for events in steps), steps
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks


STATIC_PROMPTS = PROMPTS + ["Once upon a time, in a village by the sea, there lived an old fisherman who"]


def batch_replies(engine, tokenizer, tag: str) -> dict[int, list[int]]:
    """Five prompts of different lengths and budgets at once (the batch shrinks as they end), and a
    sixth arriving while they decode (a step of decodes and a prefill chunk): greedy, and sampled
    with seeds."""

    def add(i: int) -> None:
        params = greedy(8 + 6 * i) if i % 2 == 0 else SamplingParams(max_tokens=8 + 6 * i, temperature=0.8, top_k=40, seed=i)
        engine.add_request(f"{tag}-{i}", tokenizer(STATIC_PROMPTS[i]).input_ids, params)

    for i in range(len(STATIC_PROMPTS) - 1):
        add(i)
    results: dict[str, list] = {}
    for _ in range(3):
        for out in engine.step():
            results.setdefault(out.request_id, []).append(out)
    add(len(STATIC_PROMPTS) - 1)
    for request_id, outputs in run_to_completion(engine).items():
        results.setdefault(request_id, []).extend(outputs)
    return {i: generated_ids(results[f"{tag}-{i}"]) for i in range(len(STATIC_PROMPTS))}


def test_a_static_bucketed_decode_gives_the_dynamic_tokens(torch_path, smollm_tokenizer):
    """Decode steps padded to batch buckets (5 rows run as 8, then 4, 2, 1), reading tables of a
    power-of-two width, the padding rows writing to the reserved block, a prefill chunk run after
    them in the same step: the tokens the dynamic step gives, and the blocks all come back."""
    engine, _ = torch_path
    runner = engine.model_runner
    dynamic = batch_replies(engine, smollm_tokenizer, "dynamic")
    static = runner.enable_static_decode(max_rows=8, max_blocks=64, graphs=False)
    try:
        assert batch_replies(engine, smollm_tokenizer, "static") == dynamic
    finally:
        runner.static_decode = None
    assert static.buckets == [1, 2, 4, 8] and static.steps >= 20
    assert engine.kv_cache.num_free_blocks == engine.kv_cache.num_blocks


def test_a_cuda_engine_never_builds_the_cpu_kernels(monkeypatch):
    def build():
        raise AssertionError("the CPU kernels were asked for")

    monkeypatch.setattr(loader, "kernels", build)
    loader.cap_kernels(EngineConfig(device="cpu"), torch.device("cuda"))  # returns without asking
    with pytest.raises(AssertionError, match="were asked for"):
        loader.cap_kernels(EngineConfig(device="cpu"), torch.device("cpu"))


def test_a_gguf_loads_through_our_reader_to_transformers_values(torch_path, monkeypatch):
    engine, _ = torch_path
    reference = dict(engine.bundle.model.named_parameters())  # built from transformers' de-quantized state
    monkeypatch.setattr(loader, "_read_weights", lambda source: pytest.fail("transformers de-quantized the file"))
    config = EngineConfig(dtype=dtype_name(engine.bundle.dtype), device="cpu")
    with without_cpu_kernels():
        bundle = loader.load_model(config)
    ours = dict(bundle.model.named_parameters())
    assert ours.keys() == reference.keys()
    assert all(ours[name].dtype == engine.bundle.dtype and torch.equal(ours[name], reference[name]) for name in ours)
    assert bundle.cpu_step is None and bundle.weights_format == "none"
