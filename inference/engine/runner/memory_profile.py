"""What the engine needs of a GPU's memory besides its KV pool: the weights and the peak of its
largest step, measured before the pool is planned (kv_cache/memory_plan.gpu_budget takes it off the engine's share).

The largest step is a prefill chunk of `max_num_batched_tokens` tokens: it is run once, for real,
over a pool just big enough for it, and torch's allocator reports its peak. The sampler's peak
(every slot's logits row, sorted and softmaxed for top-p) is added from its shape: a few float32
and int64 copies of `slots x vocabulary`. kv_cache/memory_plan.py sizes the engine's pool with it.
"""

from __future__ import annotations

import torch

from ..kv_cache.block_pool import STATE
from ..kv_cache.coordinator import KVCacheCoordinator
from ..kv_cache.layout import layer_kinds
from ..kv_cache.recurrent_state import RecurrentStateSlots
from ..model_runner import ModelRunner
from ..sample.sampling_params import SamplingParams
from ..scheduler import Scheduler
from ..sequence import Sequence

SAMPLER_ROW_COPIES = 6  # float32 logits, probabilities and sorted values, int64 sort indices (2 x 4 bytes)


def profile_step(bundle, block_size: int, max_num_batched_tokens: int, kv_dtype) -> None:
    """Runs the largest prefill chunk the scheduler can make, once, over a throwaway pool."""
    tokens = max(1, min(max_num_batched_tokens, bundle.max_model_len))
    num_blocks = -(-tokens // block_size)
    state = RecurrentStateSlots(1) if STATE in layer_kinds(bundle.model) else None
    runner = ModelRunner(
        bundle.model, num_blocks, block_size, bundle.dtype, bundle.device, kv_dtype, cpu_step=bundle.cpu_step, num_state_slots=1
    )
    scheduler = Scheduler(KVCacheCoordinator(num_blocks, block_size, enable_prefix_caching=False, state=state), 1, tokens)
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


def engine_bytes(config, bundle, kv_dtype, num_slots: int) -> int:
    """What the KV plan takes off the engine's share before the pool (kv_cache/memory_plan.py): on
    CUDA the weights and the largest step, profiled; on CPU nothing (the plan reads available memory)."""
    if bundle.device.type != "cuda":
        return 0
    return engine_peak_bytes(
        bundle, config.block_size, config.max_num_batched_tokens, kv_dtype, num_slots, bundle.model.vocab_size
    )
