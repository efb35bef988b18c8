"""Prefill attention: one SDPA call per chunk, causal with an offset when earlier chunks or cached
prefix blocks are already in the cache (the same on every device)."""

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


def prefill_attention(q, k, v, k_cache, v_cache, chunk: PrefillChunk, scale: float) -> torch.Tensor:
    query = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, heads, n, D]
    if chunk.block_rows is None:  # the whole context is this chunk: attend to it directly, as the cache holds it
        keys = as_stored(k[chunk.start : chunk.end].transpose(0, 1), k_cache.dtype)  # [kv_heads, L, D]
        values = as_stored(v[chunk.start : chunk.end].transpose(0, 1), v_cache.dtype)
    else:
        kv_heads = k_cache.shape[0]
        keys = gather(k_cache, chunk.block_rows, kv_heads)[:, : chunk.context_len].to(q.dtype)
        values = gather(v_cache, chunk.block_rows, kv_heads)[:, : chunk.context_len].to(q.dtype)
    attended = F.scaled_dot_product_attention(
        query,
        keys.unsqueeze(0),
        values.unsqueeze(0),
        attn_mask=chunk.causal_mask,
        is_causal=chunk.causal_mask is None,
        scale=scale,
        enable_gqa=query.shape[1] != keys.shape[0],
    )
    return attended.squeeze(0).transpose(0, 1)
