"""The KV pool's plan (memory share, cap, one full context at least) and its dtype, and the engine
lowering max_model_len to what the pool holds."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.errors import PromptTooLongError
from inference.engine.kv_cache import memory_plan
from inference.engine.kv_cache.memory_plan import bytes_per_block, plan_num_blocks
from inference.engine.sample.sampling_params import SamplingParams
from tests.support.engine_helpers import engine_for


def test_pool_plan_respects_the_budget():
    shape = (30, 3, 64)  # SmolLM2: layers, kv heads, head dim
    per_block = bytes_per_block(shape, 16, torch.bfloat16)
    assert per_block == 2 * 30 * 16 * 3 * 64 * 2
    blocks = plan_num_blocks(shape, 16, torch.bfloat16, torch.device("cpu"), kv_cache_mb=64, gpu_utilization=0.9)
    assert blocks == 64 * 1024 * 1024 // per_block


KV_SHAPE = (30, 3, 64)  # SmolLM2: 46 KB of float32 K and V a token
MB = 1024 * 1024


def planned_tokens(monkeypatch, available_mb: int, max_model_len: int, kv_cache_mb=None) -> int:
    monkeypatch.setattr(memory_plan.psutil, "virtual_memory", lambda: SimpleNamespace(available=available_mb * MB))
    return 16 * plan_num_blocks(KV_SHAPE, 16, torch.float32, torch.device("cpu"), kv_cache_mb, 0.5, max_model_len)


def test_the_planned_pool_is_a_share_of_memory_capped_and_never_below_one_full_context(monkeypatch):
    per_token = bytes_per_block(KV_SHAPE, 16, torch.float32) // 16
    assert planned_tokens(monkeypatch, 24 * 1024, 8192) * per_token <= (memory_plan.KV_CAP_MB + 1) * MB  # capped
    assert planned_tokens(monkeypatch, 24 * 1024, 8192) >= 8192
    # 1 GB free: a quarter (256 MB, 5.6k tokens) would not hold 8,192 tokens; the floor does
    assert planned_tokens(monkeypatch, 1024, 8192) >= 8192
    # 400 MB free: even the floor is more than half of it, so the pool is what half holds
    assert planned_tokens(monkeypatch, 400, 8192) < 8192
    assert planned_tokens(monkeypatch, 24 * 1024, 8192, kv_cache_mb=8) * per_token <= 8 * MB  # an explicit size wins


GB = 1024 * MB
CUDA = torch.device("cuda")


def planned_gpu_blocks(monkeypatch, free: int, total: int, utilization: float, **kw) -> int:
    """The plan on a GPU whose memory is faked (no GPU here): `free` and `total` as mem_get_info says them."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    return plan_num_blocks(KV_SHAPE, 16, torch.bfloat16, CUDA, None, utilization, **kw)


def test_the_gpu_pool_is_the_engines_share_of_total_memory_less_its_weights_and_peak(monkeypatch):
    per_block = bytes_per_block(KV_SHAPE, 16, torch.bfloat16)
    total = 141 * GB  # an H200
    first = planned_gpu_blocks(monkeypatch, 139 * GB, total, 0.45, engine_bytes=2 * GB)
    assert first == (int(total * 0.45) - 2 * GB) // per_block
    # a second engine given 0.45 starts after the first took its share: its plan is the same
    second = planned_gpu_blocks(monkeypatch, 139 * GB - int(total * 0.45), total, 0.45, engine_bytes=2 * GB)
    assert second == first


def test_the_gpu_pool_never_exceeds_what_every_slot_at_full_context_uses(monkeypatch):
    blocks = planned_gpu_blocks(monkeypatch, 139 * GB, 141 * GB, 0.9, max_model_len=8192, max_num_seqs=128, engine_bytes=GB)
    assert blocks == 128 * 8192 // 16  # 24 GB of SmolLM2's bf16 K/V, where the share would give ~125 GB


def test_the_gpu_pool_takes_at_most_what_is_free_and_refuses_a_share_the_weights_fill(monkeypatch, caplog):
    per_block = bytes_per_block(KV_SHAPE, 16, torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="minivllm.engine"):
        blocks = planned_gpu_blocks(monkeypatch, 10 * GB, 141 * GB, 0.9, engine_bytes=2 * GB)
    assert blocks == 10 * GB // per_block and "more than the GPU has free" in caplog.text
    with pytest.raises(ValueError, match="no room for a KV pool"):
        planned_gpu_blocks(monkeypatch, 139 * GB, 141 * GB, 0.01, engine_bytes=2 * GB)


def test_a_pool_smaller_than_the_context_lowers_max_model_len_and_says_so(tiny_hf, smollm_tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="minivllm.engine"):
        engine = engine_for(tiny_hf, smollm_tokenizer, num_kv_blocks=8)  # 128 tokens of a 512-token context
    assert engine.max_model_len == 128 and "max_model_len lowered to 128" in caplog.text
    engine.check_request(list(range(1, 100)), SamplingParams(max_tokens=29))  # 128: fits
    with pytest.raises(PromptTooLongError, match="maximum context length is 128"):
        engine.check_request(list(range(1, 100)), SamplingParams(max_tokens=30))
    assert engine_for(tiny_hf, smollm_tokenizer).max_model_len == 512  # the planned pool holds the context


def test_the_cache_is_float16_under_smaller_weights_on_cpu_else_the_models_dtype():
    auto = EngineConfig()
    for weights in ("int4", "q8_0", "int8", "bf16"):  # llama.cpp's default: half the bytes
        assert auto.kv_dtype_for(torch.float32, "cpu", weights) == torch.float16
    assert auto.kv_dtype_for(torch.float32, "cpu", "none") == torch.float32  # float32 weights: HF's float32 logits
    assert auto.kv_dtype_for(torch.bfloat16, "cpu", "none") == torch.bfloat16
    assert auto.kv_dtype_for(torch.bfloat16, "cuda", "none") == torch.bfloat16
    assert EngineConfig(kv_cache_dtype="float32").kv_dtype_for(torch.float32, "cpu", "int4") == torch.float32  # explicit wins
    assert EngineConfig(kv_cache_dtype="float16").kv_dtype_for(torch.float32, "cpu", "none") == torch.float16
    assert EngineConfig.from_env({"MINIVLLM_KV_CACHE_DTYPE": "float32"}).kv_cache_dtype == "float32"
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="fp8")
    with pytest.raises(ValueError, match="float32 or float16"):  # what the CPU kernels store
        EngineConfig(kv_cache_dtype="bfloat16").kv_dtype_for(torch.float32, "cpu", "int4")
    assert EngineConfig(kv_cache_dtype="bfloat16").kv_dtype_for(torch.bfloat16, "cpu", "none") == torch.bfloat16


def test_a_float16_pool_holds_twice_the_tokens_of_a_float32_one(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer, kv_cache_mb=4, quantization="int8")
    assert engine.kv_dtype == torch.float16 and all(k.dtype == v.dtype == torch.float16 for k, v in engine.model_runner.kv_caches)
    wide = engine_for(tiny_hf, smollm_tokenizer, kv_cache_mb=4, quantization="int8", kv_cache_dtype="float32")
    assert engine.kv_cache.num_blocks == 2 * wide.kv_cache.num_blocks


def test_a_long_native_context_reserves_its_whole_k_v_only_when_asked_for(smollm_tokenizer, caplog):
    """A 262,144-token model (Qwen3.5, Gemma 4, Llama 3.2) served with no settings plans K/V for what
    the memory share holds (at least 32,768 tokens), not its whole context: that was 3 GB before
    Qwen3.5-2B served a token. MINIVLLM_MAX_MODEL_LEN asking for the whole context gets it whole."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=49152,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=262144,
        )
    ).eval()
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        default = engine_for(hf, smollm_tokenizer)
    assert memory_plan.DEFAULT_FLOOR_TOKENS <= default.max_model_len < 262144
    assert default.kv_cache.num_blocks * 16 < 262144
    assert "memory plan: K/V of" in caplog.text and "max_model_len lowered" in caplog.text
    from inference.engine.engine_stats import EngineStats

    stats = EngineStats.of(default)  # /stats says the plan: the context served and the pool's size
    assert stats.max_model_len == default.max_model_len and stats.kv_pool_mb > 0 and stats.state_pool_mb == 0
    asked = engine_for(hf, smollm_tokenizer, max_model_len=262144)
    assert asked.max_model_len == 262144
