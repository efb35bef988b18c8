"""The memory plan: how many blocks fit in memory once what is sized by the batch is taken off the
budget first (the sliding-window layers' pool, sliding_window.py; a hybrid's state slots and
checkpoints, recurrent_state.py). Which layer keeps which kind of cache: layout.py."""

from __future__ import annotations

import logging

import psutil
import torch

from .block_pool import FULL, STATE, WINDOW
from .layout import kind_head_shape, layer_kinds, window_pool_blocks, writer_counts
from .recurrent_state import checkpoint_rows

MB = 1024 * 1024
log = logging.getLogger("minivllm.engine")


def bytes_per_block(kv_shape: tuple[int, int, int], block_size: int, dtype: torch.dtype) -> int:
    layers, kv_heads, head_dim = kv_shape
    return 2 * layers * block_size * kv_heads * head_dim * torch.finfo(dtype).bits // 8


# CPU: the KV pool takes this share of the memory available at start, at most KV_CAP_MB and
# KV_CAP_TOKENS, and at least one full-context request where memory allows. 1 GB of float16 K/V is
# 46.6k of SmolLM2's tokens: one full 8,192-token context and 32 streams of ~1,200 (llama-server with
# -c 32768 keeps ~0.75 GB of float16 K/V). A model whose tokens cost less (few KV heads, or the few
# full-attention layers of a sliding-window model) stops at 64k tokens, twice that llama-server's.
KV_MEMORY_FRACTION = 0.25
KV_CAP_MB = 1024
KV_CAP_TOKENS = 65536
KV_CEILING_FRACTION = 0.5  # never more than this share of available memory, whatever is asked
# The floor of one full context holds up to this many tokens unless MINIVLLM_MAX_MODEL_LEN asks for
# more: a 262,144-token model (Qwen3.5, Gemma 3 and 4, Llama 3.2) otherwise reserved its whole
# context (3 GB of K/V for Qwen3.5-2B's 6 attention layers; 4 GB for Llama-3.2-1B) before serving a
# token. Above it, the context served is what the planned share holds, as llama-server's --fit and
# Ollama's default context do, and the log says so.
DEFAULT_FLOOR_TOKENS = 32768


def fit_context(num_blocks: int, block_size: int, max_model_len: int) -> int:
    """The model's context, or what the KV pool holds where that is less (logged: /v1/models and
    the context-length errors report the lowered figure)."""
    capacity = num_blocks * block_size
    if capacity >= max_model_len:
        return max_model_len
    log.warning(
        "the KV pool holds %d tokens, less than the model's %d-token context: max_model_len lowered to %d "
        "(MINIVLLM_MAX_MODEL_LEN asks for a longer one, held whole; MINIVLLM_KV_CACHE_MB or MINIVLLM_NUM_KV_BLOCKS sets the pool)",
        capacity,
        max_model_len,
        capacity,
    )
    return capacity


def plan_num_blocks(
    kv_shape,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device,
    kv_cache_mb: int | None,
    gpu_utilization: float,
    max_model_len: int = 0,
    max_num_seqs: int = 0,
    engine_bytes: int = 0,
    reserved_bytes: int = 0,
    share: float = 1.0,
    floor_tokens: int | None = None,
) -> int:
    """How many blocks fit: MINIVLLM_KV_CACHE_MB on CPU, else planned from available memory (see
    above, never fewer than one `max_model_len` request where memory allows); on CUDA, what is left
    of the engine's share of the GPU (`gpu_budget`); never more than `max_num_seqs` full contexts
    use, nor more than exists. The engine lowers max_model_len to what the pool holds.
    `reserved_bytes`: what is sized apart (the sliding-window layers' pool, a hybrid's state slots), taken first.
    `share`: this engine's part of the planned budget where several models share the process (the
    full-context floor stays whole). `floor_tokens`: the floor's tokens, where not the whole `max_model_len`."""
    per_block = bytes_per_block(kv_shape, block_size, dtype)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = gpu_budget(total, free, gpu_utilization, engine_bytes)
    else:
        available = psutil.virtual_memory().available
        if kv_cache_mb is None:
            floor = max_model_len if floor_tokens is None else min(floor_tokens, max_model_len)
            full_context = -(-floor // block_size) * per_block
            cap = min(KV_CAP_MB * MB, KV_CAP_TOKENS // block_size * per_block + reserved_bytes)
            planned = int(min(int(available * KV_MEMORY_FRACTION), cap) * share)
            kv_cache_mb = max(planned, full_context + reserved_bytes) // MB + 1
        budget = min(kv_cache_mb * MB, int(available * KV_CEILING_FRACTION))
    num_blocks = (budget - reserved_bytes) // per_block
    if num_blocks < 1:
        apart = f", after {reserved_bytes // MB} MB sized by the batch (window pool, state slots)," if reserved_bytes else ""
        raise ValueError(f"the KV cache budget ({budget // MB} MB){apart} is smaller than one block ({per_block} bytes)")
    if max_num_seqs and max_model_len:  # more than every slot's full context would never be used
        num_blocks = min(num_blocks, max_num_seqs * -(-max_model_len // block_size))
    return num_blocks


def gpu_budget(total: int, free: int, utilization: float, engine_bytes: int) -> int:
    """The KV pool's bytes on a GPU, as vLLM's `gpu_memory_utilization` plans them: the engine may
    use `utilization` of the GPU's total memory, of which its weights and its peak step's
    activations (`engine_bytes`, profiled: runner/memory_profile.py) are taken first. A share of total
    memory, not of free memory, so that two engines given 0.45 each fit on one GPU whichever starts
    first; never more than is free now (the CUDA context and other processes hold the rest)."""
    budget = int(total * utilization) - engine_bytes
    if budget <= 0:
        raise ValueError(
            f"MINIVLLM_GPU_MEMORY_UTILIZATION={utilization} gives this engine {total * utilization / MB:,.0f} MB of the "
            f"GPU's {total / MB:,.0f} MB, and its weights and peak step take {engine_bytes / MB:,.0f} MB: no room for a KV pool"
        )
    if budget > free:
        log.warning(
            "the KV pool's share (%d MB) is more than the GPU has free (%d MB): another process holds part of it; "
            "the pool takes what is free",
            budget // MB,
            free // MB,
        )
        budget = free
    return budget


def split_kv_shape(model) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(full-attention layers, kv heads, head dim) and the same for the sliding-window layers; only
    the layers that write K/V of their own count (a KV-shared layer reads another's)."""
    counts = writer_counts(model)
    return tuple((counts.get(kind, 0), *kind_head_shape(model, kind)) for kind in (FULL, WINDOW))


def state_bytes(model, num_slots: int) -> int:
    """The recurrent-state pool: every recurrent layer's conv and recurrent state (float32) per slot."""
    shapes = model.state_shapes() if STATE in layer_kinds(model) else []
    return num_slots * 4 * sum(conv[0] * conv[1] + rec[0] * rec[1] * rec[2] for conv, rec in shapes)


def plan_kv_blocks(config, bundle, kv_dtype, num_slots: int, engine_bytes: int = 0) -> int:
    """The full-attention pool's blocks (plan_num_blocks), after the sliding-window pool's share;
    `engine_bytes`: on CUDA, what the weights and the largest step take (runner/memory_profile.py)."""
    full_shape, window_shape = split_kv_shape(bundle.model)
    window_blocks = window_pool_blocks(
        bundle.model, config.block_size, num_slots, config.max_num_batched_tokens, bundle.max_model_len
    )
    if window_blocks and full_shape[0] == 0:  # every layer windowed: the full pool is bookkeeping only
        return num_slots * -(-bundle.max_model_len // config.block_size)
    checkpoints = checkpoint_rows(num_slots, config.enable_prefix_caching)
    states = state_bytes(bundle.model, num_slots + checkpoints)  # a hybrid's state slots, before the blocks
    windows = (window_blocks + 1) * bytes_per_block(window_shape, config.block_size, kv_dtype) if window_blocks else 0
    num_blocks = plan_num_blocks(
        full_shape,
        config.block_size,
        kv_dtype,
        bundle.device,
        config.kv_cache_mb,
        config.gpu_memory_utilization,
        bundle.max_model_len,
        num_slots,
        engine_bytes,
        reserved_bytes=states + windows,
        share=config.kv_share,
        floor_tokens=None if config.max_model_len else DEFAULT_FLOOR_TOKENS,  # an asked-for context is held whole
    )
    log.info(
        "memory plan: K/V of %d tokens (%.0f MB, %d full-attention layers)%s%s",
        num_blocks * config.block_size,
        num_blocks * bytes_per_block(full_shape, config.block_size, kv_dtype) / MB,
        full_shape[0],
        f", a sliding-window pool of {windows / MB:.0f} MB" if windows else "",
        f", {num_slots} + {checkpoints} recurrent-state rows of {states / (num_slots + checkpoints) / MB:.1f} MB "
        "(backed as first written)"
        if states
        else "",
    )
    return num_blocks
