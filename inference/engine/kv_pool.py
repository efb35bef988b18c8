"""The KV pool: how many blocks fit in memory, and their preallocated K/V tensors, one pair per layer."""

from __future__ import annotations

import ctypes
import logging
import math
import mmap
import threading

import psutil
import torch

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


def fit_context(num_blocks: int, block_size: int, max_model_len: int) -> int:
    """The model's context, or what the KV pool holds where that is less (logged: /v1/models and
    the context-length errors report the lowered figure)."""
    capacity = num_blocks * block_size
    if capacity >= max_model_len:
        return max_model_len
    log.warning(
        "the KV pool holds %d tokens, less than the model's %d-token context: max_model_len lowered to %d "
        "(MINIVLLM_KV_CACHE_MB or MINIVLLM_NUM_KV_BLOCKS sets the pool)",
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
) -> int:
    """How many blocks fit: MINIVLLM_KV_CACHE_MB on CPU, else planned from available memory (see
    above, never fewer than one `max_model_len` request where memory allows); on CUDA, what is left
    of the engine's share of the GPU (`gpu_budget`); never more than `max_num_seqs` full contexts
    use, nor more than exists. The engine lowers max_model_len to what the pool holds.
    `reserved_bytes`: a part of the pool sized apart (the sliding-window layers'), taken first."""
    per_block = bytes_per_block(kv_shape, block_size, dtype)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = gpu_budget(total, free, gpu_utilization, engine_bytes)
    else:
        available = psutil.virtual_memory().available
        if kv_cache_mb is None:
            full_context = -(-max_model_len // block_size) * per_block
            cap = min(KV_CAP_MB * MB, KV_CAP_TOKENS // block_size * per_block + reserved_bytes)
            kv_cache_mb = max(min(int(available * KV_MEMORY_FRACTION), cap), full_context + reserved_bytes) // MB + 1
        budget = min(kv_cache_mb * MB, int(available * KV_CEILING_FRACTION))
    num_blocks = (budget - reserved_bytes) // per_block
    if num_blocks < 1:
        raise ValueError(f"the KV cache budget ({budget // MB} MB) is smaller than one block ({per_block} bytes)")
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


MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23  # Linux's madvise advice numbers (the latter: 5.14 and later)


def _zero_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The CPU pool as anonymous memory, zero by the kernel's promise: torch.zeros wrote 1 GB of zeros
    before the engine could be ready (~1.3 s on a 2-core EPYC). A background thread then asks the
    kernel to back every page (MADV_POPULATE_WRITE, which writes nothing, so blocks already in use
    keep their K/V), so the resident size settles at the pool's within a second or two instead of
    creeping up as requests first reach each block."""
    nbytes = math.prod(shape) * torch.finfo(dtype).bits // 8
    memory = mmap.mmap(-1, max(nbytes, 1))
    tensor = torch.frombuffer(memory, dtype=dtype).view(shape)  # the tensor keeps the map alive
    address = tensor.data_ptr()
    libc = _libc()
    if libc is not None:
        libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), MADV_HUGEPAGE)
        threading.Thread(
            target=libc.madvise,
            args=(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), MADV_POPULATE_WRITE),
            name="kv-pool-populate",
            daemon=True,
        ).start()
    return tensor


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None


def allocate_kv_pool(kv_shape, num_blocks: int, block_size: int, dtype, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One preallocated K and V tensor per layer, head-major: [kv_heads, num_blocks, block_size, head_dim].

    Head-major because decode attention batches over (kv head, sequence): gathering a
    sequence's blocks out of this layout yields keys already laid out for one batched matmul,
    where a [slots, kv_heads, head_dim] layout needs a transposing copy of every key, every
    layer, every step (measured 2.5x the cost of the attention maths at 32 sequences).
    """
    layers, kv_heads, head_dim = kv_shape
    if layers == 0:  # (a model whose every layer keeps its K/V in the sliding-window pool)
        return []
    shape = (layers, 2, kv_heads, num_blocks, block_size, head_dim)
    pool = _zero_pages(shape, dtype) if device.type == "cpu" else torch.zeros(shape, dtype=dtype, device=device)
    return [(pool[i, 0], pool[i, 1]) for i in range(layers)]
