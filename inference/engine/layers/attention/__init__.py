"""Attention over the paged KV cache.

Every layer's cache is head-major, `[kv_heads, num_blocks, block_size, head_dim]` (see
kv_cache/tensors.allocate_kv_pool), in float16 on CPU where the weights are smaller than float32
(config.kv_dtype_for): the maths stays in the model's dtype, the cache's values widened as read.
The model runner turns each step's block tables into row indices once, shared by every layer
(metadata.py): `write_rows` into the `[kv_heads * slots, head_dim]` view for the new tokens' K/V,
and block rows into the `[kv_heads * num_blocks, block_size * head_dim]` view for reading a whole
context back, a block at a time.

A step's tokens are laid out decodes first (one token per sequence), then prefill chunks
(prefill.py: one SDPA call each). Decodes have three back ends, chosen once for the runner by
`choose_decode_attention`: our C++ kernels reading blocks in place on CPU (decode_kernels.py), a
Triton kernel reading them in place on CUDA (decode_triton.py), or gathered blocks and two batched
matmuls (decode_gathered.py: the reference, and the CPU's torch path). Each builds its own
metadata and attends through it, so the layers never ask which one runs. Every back end takes a
sliding window (Gemma 3's local layers): keys more than `window - 1` positions before a query are
masked, so such a layer's output depends on its window only.
"""

from __future__ import annotations

import torch

from ..cpu_kernels import cpu_kernels_for
from .decode_gathered import GatheredDecode
from .decode_kernels import KernelDecode
from .decode_triton import TritonDecode, triton_available
from .metadata import AttentionMetadata, PrefillChunk
from .prefill import prefill_attention

__all__ = ["AttentionMetadata", "PrefillChunk", "attend", "choose_decode_attention", "paged_attention", "write_to_cache"]


def choose_decode_attention(
    device: torch.device, dtype: torch.dtype, head_dim: int | tuple[int, ...], kv_dtype: torch.dtype, block_size: int = 16
):
    """(back end class, kernels module or None): on CPU our kernels read the cache in place for
    float32 queries over a float32 or float16 cache; on CUDA the Triton kernel does (blocks of a
    power-of-two size, as its block loads need); everywhere else the gathered torch path.
    `head_dim`: every head width the model's layers attend with (Gemma 4's full layers are wider)."""
    if device.type == "cuda" and triton_available() and block_size & (block_size - 1) == 0:
        return TritonDecode, None
    widths = head_dim if isinstance(head_dim, tuple) else (head_dim,)
    cpp = cpu_kernels_for(device, dtype, *widths) if kv_dtype in (torch.float32, torch.float16) else None
    return (KernelDecode, cpp) if cpp is not None else (GatheredDecode, None)


def paged_attention(
    q: torch.Tensor,  # [T, heads, head_dim]
    k: torch.Tensor,  # [T, kv_heads, head_dim]
    v: torch.Tensor,
    k_cache: torch.Tensor,  # [kv_heads, num_blocks, block_size, head_dim]
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
    write: bool = True,
) -> torch.Tensor:
    """Writes the step's K/V into the cache, then attends; returns [T, heads, head_dim]. `window`:
    a sliding-window layer's span (each query sees its own key and the window - 1 before it); such
    a layer's cache is the sliding-window pool where the runner keeps one (`meta.window`).
    `write=False`: a KV-shared layer (Gemma 4) attends over the K/V an earlier layer wrote this step."""
    if window is not None and meta.window is not None:
        meta = meta.window
    if write:
        write_to_cache(k, v, k_cache, v_cache, meta)
    return attend(q, k, v, k_cache, v_cache, meta, scale, window)


def write_to_cache(k, v, k_cache, v_cache, meta: AttentionMetadata) -> None:
    # index_copy_, not `cache[idx] = x`: measured ~100x faster on CPU for these shapes
    # (advanced-index assignment takes a slow generic path).
    dim = k.shape[-1]
    k_cache.view(-1, dim).index_copy_(0, meta.write_rows, k.transpose(0, 1).reshape(-1, dim).to(k_cache.dtype))
    v_cache.view(-1, dim).index_copy_(0, meta.write_rows, v.transpose(0, 1).reshape(-1, dim).to(v_cache.dtype))


def attend(q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float, window: int | None = None) -> torch.Tensor:
    """Attention over a cache that already holds this step's K/V; returns [T, heads, head_dim]."""
    nd = meta.num_decodes
    if not meta.prefills:
        if not nd:
            return torch.empty_like(q)
        return meta.decode.attend(q, k_cache, v_cache, scale, window)
    out = torch.empty_like(q)
    if nd:
        out[:nd] = meta.decode.attend(q[:nd], k_cache, v_cache, scale, window)
    for chunk in meta.prefills:
        out[chunk.start : chunk.end] = prefill_attention(q, k, v, k_cache, v_cache, chunk, scale, window)
    return out
