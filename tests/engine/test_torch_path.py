"""The device-generic torch path, the one CUDA takes, run on the CPU: MINIVLLM_CPU_KERNELS=0 binds
no C++ kernel and keeps plain nn.Linear weights, its greedy tokens are HF's, in float32 and in
bfloat16 (against HF in the same dtype), batched, and a GGUF loads as CUDA loads it: our reader,
each tensor de-quantized by torch on the device, to exactly transformers' values."""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from inference.engine import loader
from inference.engine.config import EngineConfig
from inference.engine.device import dtype_name
from inference.engine.engine import LLMEngine
from inference.engine.kernels import kernels
from inference.engine.layers.norm import RMSNorm
from tests.engine.helpers import generated_ids, greedy, run_to_completion

PROMPTS = ["The future of AI inference is", "def fibonacci(n):", "Paris is the capital of", "Water boils at a temperature of"]


@contextmanager
def without_cpu_kernels():
    before = os.environ.get("MINIVLLM_CPU_KERNELS")
    os.environ["MINIVLLM_CPU_KERNELS"] = "0"
    kernels.cache_clear()  # kernels() answers once per process: ask it again under the switch
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MINIVLLM_CPU_KERNELS")
        else:
            os.environ["MINIVLLM_CPU_KERNELS"] = before
        kernels.cache_clear()


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
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


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
