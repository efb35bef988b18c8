"""BlockManager: reference counts, chained prefix hashes, LRU reuse of freed cached blocks."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from inference.engine import kv_cache
from inference.engine.config import EngineConfig
from inference.engine.errors import PromptTooLongError
from inference.engine.kv_cache import BlockManager, bytes_per_block, plan_num_blocks
from inference.engine.sampling_params import SamplingParams
from inference.engine.sequence import Sequence
from tests.conftest import tiny_llama_hf
from tests.engine.helpers import engine_for


def computed_seq(manager: BlockManager, request_id: str, tokens: list[int]) -> Sequence:
    """A sequence whose prompt has been fully computed into its blocks."""
    seq = Sequence(request_id, tokens, SamplingParams())
    manager.reuse_cached_prefix(seq)
    manager.grow(seq, seq.num_uncomputed_tokens)
    seq.num_computed_tokens = len(seq)
    manager.register_computed_blocks(seq)
    return seq


def test_grow_allocates_ceil_blocks_and_free_returns_them():
    manager = BlockManager(num_blocks=10, block_size=4)
    seq = Sequence("a", list(range(9)), SamplingParams())
    manager.grow(seq, 9)
    assert len(seq.block_table) == 3 and manager.num_free_blocks == 7
    seq.num_computed_tokens = 9
    manager.grow(seq, 3)  # 12 tokens still fit in 3 blocks
    assert len(seq.block_table) == 3
    manager.grow(seq, 4)
    assert len(seq.block_table) == 4
    manager.free(seq)
    assert manager.num_free_blocks == 10 and seq.block_table == []


def test_shared_prefix_blocks_are_reference_counted():
    manager = BlockManager(num_blocks=10, block_size=4)
    first = computed_seq(manager, "a", list(range(10)))  # 2 full blocks + 1 partial
    second = Sequence("b", list(range(8)) + [99, 98, 97], SamplingParams())
    manager.reuse_cached_prefix(second)
    assert second.block_table == first.block_table[:2]
    assert second.num_computed_tokens == 8
    assert [manager.blocks[b].ref_count for b in first.block_table[:2]] == [2, 2]
    manager.free(first)
    assert [manager.blocks[b].ref_count for b in second.block_table] == [1, 1]
    assert manager.num_free_blocks == 10 - 2


def test_hash_is_chained_so_equal_blocks_after_different_prefixes_do_not_match():
    manager = BlockManager(num_blocks=10, block_size=2)
    computed_seq(manager, "a", [1, 2, 3, 4, 5])
    other = Sequence("b", [9, 9, 3, 4, 5], SamplingParams())  # block [3, 4] follows a different prefix
    manager.reuse_cached_prefix(other)
    assert other.block_table == [] and manager.prefix_hits == 0


def test_at_least_one_prompt_token_is_left_to_compute():
    manager = BlockManager(num_blocks=10, block_size=4)
    computed_seq(manager, "a", list(range(8)))
    again = Sequence("b", list(range(8)), SamplingParams())
    manager.reuse_cached_prefix(again)
    assert again.num_computed_tokens == 4  # the second block is recomputed to get the last logits


def test_freed_cached_blocks_are_reused_until_evicted_least_recent_first():
    manager = BlockManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    old = computed_seq(manager, "old", [1, 2, 3])
    new = computed_seq(manager, "new", [7, 8, 9])
    manager.free(old)
    manager.free(new)
    assert manager.num_free_blocks == 4
    filler = Sequence("filler", [5] * 6, SamplingParams())
    manager.grow(filler, 6)  # 3 blocks: 2 never-hashed + 1 evicted: the older cached block goes first
    old_again = Sequence("old2", [1, 2, 3], SamplingParams())
    manager.reuse_cached_prefix(old_again)
    new_again = Sequence("new2", [7, 8, 9], SamplingParams())
    manager.reuse_cached_prefix(new_again)
    assert old_again.num_computed_tokens == 0
    assert new_again.num_computed_tokens == 2


def test_prefix_caching_off_never_shares():
    manager = BlockManager(num_blocks=10, block_size=4, enable_prefix_caching=False)
    computed_seq(manager, "a", list(range(10)))
    b = Sequence("b", list(range(10)), SamplingParams())
    manager.reuse_cached_prefix(b)
    assert b.block_table == [] and manager.prefix_queries == 0


def test_pool_plan_respects_the_budget():
    shape = (30, 3, 64)  # SmolLM2: layers, kv heads, head dim
    per_block = bytes_per_block(shape, 16, torch.bfloat16)
    assert per_block == 2 * 30 * 16 * 3 * 64 * 2
    blocks = plan_num_blocks(shape, 16, torch.bfloat16, torch.device("cpu"), kv_cache_mb=64, gpu_fraction=0.5)
    assert blocks == 64 * 1024 * 1024 // per_block


KV_SHAPE = (30, 3, 64)  # SmolLM2: 46 KB of float32 K and V a token
MB = 1024 * 1024


def planned_tokens(monkeypatch, available_mb: int, max_model_len: int, kv_cache_mb=None) -> int:
    monkeypatch.setattr(kv_cache.psutil, "virtual_memory", lambda: SimpleNamespace(available=available_mb * MB))
    return 16 * plan_num_blocks(KV_SHAPE, 16, torch.float32, torch.device("cpu"), kv_cache_mb, 0.5, max_model_len)


def test_the_planned_pool_is_a_share_of_memory_capped_and_never_below_one_full_context(monkeypatch):
    per_token = bytes_per_block(KV_SHAPE, 16, torch.float32) // 16
    assert planned_tokens(monkeypatch, 24 * 1024, 8192) * per_token <= (kv_cache.KV_CAP_MB + 1) * MB  # capped
    assert planned_tokens(monkeypatch, 24 * 1024, 8192) >= 8192
    # 1 GB free: a quarter (256 MB, 5.6k tokens) would not hold 8,192 tokens; the floor does
    assert planned_tokens(monkeypatch, 1024, 8192) >= 8192
    # 400 MB free: even the floor is more than half of it, so the pool is what half holds
    assert planned_tokens(monkeypatch, 400, 8192) < 8192
    assert planned_tokens(monkeypatch, 24 * 1024, 8192, kv_cache_mb=8) * per_token <= 8 * MB  # an explicit size wins


@pytest.fixture(scope="module")
def tiny_llama_hf_model():
    return tiny_llama_hf()


def test_a_pool_smaller_than_the_context_lowers_max_model_len_and_says_so(tiny_llama_hf_model, smollm_tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="minivllm.engine"):
        engine = engine_for(tiny_llama_hf_model, smollm_tokenizer, num_kv_blocks=8)  # 128 tokens of a 512-token context
    assert engine.max_model_len == 128 and "max_model_len lowered to 128" in caplog.text
    engine.check_request(list(range(1, 100)), SamplingParams(max_tokens=29))  # 128: fits
    with pytest.raises(PromptTooLongError, match="maximum context length is 128"):
        engine.check_request(list(range(1, 100)), SamplingParams(max_tokens=30))
    assert engine_for(tiny_llama_hf_model, smollm_tokenizer).max_model_len == 512  # the planned pool holds the context


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


def test_a_float16_pool_holds_twice_the_tokens_of_a_float32_one(tiny_llama_hf_model, smollm_tokenizer):
    engine = engine_for(tiny_llama_hf_model, smollm_tokenizer, kv_cache_mb=4, quantization="int8")
    assert engine.kv_dtype == torch.float16 and all(k.dtype == v.dtype == torch.float16 for k, v in engine.runner.kv_caches)
    wide = engine_for(tiny_llama_hf_model, smollm_tokenizer, kv_cache_mb=4, quantization="int8", kv_cache_dtype="float32")
    assert engine.block_manager.num_blocks == 2 * wide.block_manager.num_blocks
