"""What the engine needs of a GPU's memory besides its KV pool: the weights and the peak of its
largest step, measured before the pool is planned (kv_pool.gpu_budget takes it off the engine's share).

The largest step is a prefill chunk of `max_num_batched_tokens` tokens: it is run once, for real,
over a pool just big enough for it, and torch's allocator reports its peak. The sampler's peak
(every slot's logits row, sorted and softmaxed for top-p) is added from its shape: a few float32
and int64 copies of `slots x vocabulary`. `plan_kv_blocks` sizes the engine's pool with it.
"""

from __future__ import annotations

import torch

from ..block_manager import BlockManager
from ..kv_pool import bytes_per_block, plan_num_blocks
from ..model_runner import ModelRunner
from ..sample.sampling_params import SamplingParams
from ..scheduler import Scheduler
from ..sequence import Sequence
from .kv_layout import split_kv_shape, window_pool_blocks

SAMPLER_ROW_COPIES = 6  # float32 logits, probabilities and sorted values, int64 sort indices (2 x 4 bytes)


def profile_step(bundle, block_size: int, max_num_batched_tokens: int, kv_dtype) -> None:
    """Runs the largest prefill chunk the scheduler can make, once, over a throwaway pool."""
    tokens = max(1, min(max_num_batched_tokens, bundle.max_model_len))
    num_blocks = -(-tokens // block_size)
    runner = ModelRunner(bundle.model, num_blocks, block_size, bundle.dtype, bundle.device, kv_dtype, cpu_step=bundle.cpu_step)
    scheduler = Scheduler(BlockManager(num_blocks, block_size, enable_prefix_caching=False), 1, tokens)
    scheduler.add(Sequence("memory-profile", [0] * tokens, SamplingParams(max_tokens=1)))
    batch = scheduler.schedule()
    runner.run(batch)
    runner.release_kv_pool()


def engine_peak_bytes(bundle, block_size: int, max_num_batched_tokens: int, kv_dtype, num_slots: int, vocab_size: int) -> int:
    """CUDA: the bytes torch's allocator held at the peak of the largest step (the weights among
    them), plus the sampler's rows."""
    device = bundle.device
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    profile_step(bundle, block_size, max_num_batched_tokens, kv_dtype)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_reserved(device)
    torch.cuda.empty_cache()
    return peak + num_slots * vocab_size * 4 * SAMPLER_ROW_COPIES


def plan_kv_blocks(config, bundle, kv_dtype, num_slots: int) -> int:
    """The pool's size from memory (kv_pool.plan_num_blocks); on CUDA after profiling what the
    weights and the largest step take of the engine's share."""
    engine_bytes = 0
    if bundle.device.type == "cuda":
        engine_bytes = engine_peak_bytes(
            bundle, config.block_size, config.max_num_batched_tokens, kv_dtype, num_slots, bundle.model.vocab_size
        )
    full_shape, window_shape = split_kv_shape(bundle.model)
    window_blocks = window_pool_blocks(
        bundle.model, config.block_size, num_slots, config.max_num_batched_tokens, bundle.max_model_len
    )
    if window_blocks and full_shape[0] == 0:  # every layer windowed: the full pool is bookkeeping only
        return num_slots * -(-bundle.max_model_len // config.block_size)
    return plan_num_blocks(
        full_shape if window_blocks else bundle.model.kv_shape,
        config.block_size,
        kv_dtype,
        bundle.device,
        config.kv_cache_mb,
        config.gpu_memory_utilization,
        bundle.max_model_len,
        num_slots,
        engine_bytes,
        reserved_bytes=(window_blocks + 1) * bytes_per_block(window_shape, config.block_size, kv_dtype) if window_blocks else 0,
    )
