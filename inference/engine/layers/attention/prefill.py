"""Prefill attention: one SDPA call per chunk, causal with an offset when earlier chunks or cached
prefix blocks are already in the cache.

On CUDA the call is shaped for SDPA's flash and memory-efficient back ends: a boolean mask or
`enable_gqa` would send it to the math back end, which materialises every score. So K/V heads are
repeated for grouped queries and a chunk over earlier context gets its offset causal mask as
`causal_lower_right`, which those kernels apply themselves. The CPU keeps the boolean mask and GQA
in SDPA (no repeated copy); both forms give the same numbers (tests/engine/layers)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .metadata import PrefillChunk


def gather(cache: torch.Tensor, block_rows: torch.Tensor, groups: int) -> torch.Tensor:
    """[groups, blocks * block_size, head_dim]: whole blocks copied out, one row per (kv head, block)."""
    # index_select, not `cache[idx]`: measured ~6x faster on CPU for these shapes.
    kv_heads, num_blocks, block_size, dim = cache.shape
    return cache.view(kv_heads * num_blocks, block_size * dim).index_select(0, block_rows).view(groups, -1, dim)


def as_stored(x: torch.Tensor, cache_dtype: torch.dtype) -> torch.Tensor:
    """x rounded as the cache stores it: every read of a token's K/V sees the same values, whether
    its prompt was prefilled in one chunk or several."""
    return x if x.dtype == cache_dtype else x.to(cache_dtype).to(x.dtype)


def prefill_attention(q, k, v, k_cache, v_cache, chunk: PrefillChunk, scale: float, window: int | None = None) -> torch.Tensor:
    query = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, heads, n, D]
    if chunk.block_rows is None:  # the whole context is this chunk: attend to it directly, as the cache holds it
        keys = as_stored(k[chunk.start : chunk.end].transpose(0, 1), k_cache.dtype)  # [kv_heads, L, D]
        values = as_stored(v[chunk.start : chunk.end].transpose(0, 1), v_cache.dtype)
    else:
        kv_heads = k_cache.shape[0]
        keys = gather(k_cache, chunk.block_rows, kv_heads)[:, : chunk.context_len].to(q.dtype)
        values = gather(v_cache, chunk.block_rows, kv_heads)[:, : chunk.context_len].to(q.dtype)
    if window is not None and window < chunk.context_len:
        return windowed_sdpa(query, keys, values, chunk, scale, window).squeeze(0).transpose(0, 1)
    attended = chunk_sdpa(query, keys, values, chunk, scale, fused=query.is_cuda)
    return attended.squeeze(0).transpose(0, 1)


def windowed_sdpa(query, keys, values, chunk: PrefillChunk, scale: float, window: int) -> torch.Tensor:
    """A sliding-window layer's chunk: only the keys some query of the chunk reaches (from the first
    query's window on), under a mask that is causal and `window` keys wide. The boolean mask sends
    CUDA's SDPA to its math back end, which holds every score of the chunk: correct, not yet fast
    (never run on a GPU)."""
    if window not in chunk.window_masks:  # made by the window's first layer, read by the rest
        first_query = chunk.context_len - (chunk.end - chunk.start)  # the chunk's first position
        lo = max(0, first_query - window + 1)
        positions = torch.arange(lo, chunk.context_len, device=query.device)
        queries = torch.arange(first_query, chunk.context_len, device=query.device)[:, None]
        chunk.window_masks[window] = (lo, (positions[None, :] <= queries) & (positions[None, :] > queries - window))
    lo, mask = chunk.window_masks[window]  # mask: [n, L - lo]
    keys, values = keys[:, lo:], values[:, lo:]
    group = query.shape[1] // keys.shape[0]
    if group > 1 and query.is_cuda:  # as chunk_sdpa: no enable_gqa on CUDA
        keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
        group = 1
    return F.scaled_dot_product_attention(
        query, keys.unsqueeze(0), values.unsqueeze(0), attn_mask=mask, scale=scale, enable_gqa=group > 1
    )


def chunk_sdpa(query, keys, values, chunk: PrefillChunk, scale: float, fused: bool) -> torch.Tensor:
    """query [1, heads, n, D] over keys / values [kv_heads, L, D]; `fused`: in the form the flash
    and memory-efficient back ends take."""
    group = query.shape[1] // keys.shape[0]
    if not fused:
        return F.scaled_dot_product_attention(
            query,
            keys.unsqueeze(0),
            values.unsqueeze(0),
            attn_mask=chunk.causal_mask,
            is_causal=chunk.causal_mask is None,
            scale=scale,
            enable_gqa=group > 1,
        )
    from torch.nn.attention.bias import causal_lower_right  # here: it imports torch._dynamo, which the CPU never needs

    if group > 1:
        keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
    offset_causal = chunk.causal_mask is not None
    return F.scaled_dot_product_attention(
        query,
        keys.unsqueeze(0),
        values.unsqueeze(0),
        attn_mask=causal_lower_right(query.shape[2], keys.shape[1]) if offset_causal else None,
        is_causal=not offset_causal,
        scale=scale,
    )
