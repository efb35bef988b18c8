"""Attention over the paged KV cache.

Every layer's cache is head-major, `[kv_heads, num_blocks, block_size, head_dim]` (see
kv_pool.allocate_kv_pool), in float16 on CPU where the weights are smaller than float32
(config.kv_dtype_for): the maths stays in the model's dtype, the cache's values widened as read. The model runner turns each step's block tables into row indices
once, shared by every layer: `write_rows` into the `[kv_heads * slots, head_dim]` view for the
new tokens' K/V, and block rows into the `[kv_heads * num_blocks, block_size * head_dim]` view
for reading a whole context back, a block at a time.

A step's tokens are laid out decodes first (one token per sequence, attended in two batched
matmuls over every (kv head, sequence) pair; on CPU in float32, our kernels read the blocks in
place instead, from each decode's block table), then prefill chunks (one SDPA call each, causal
with an offset when earlier chunks or cached prefix blocks are already in the cache).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...kernels import kernels


@dataclass
class PrefillChunk:
    start: int  # first token of the chunk in the step's flat token list
    end: int
    context_len: int  # tokens of this sequence in the cache after this step (cached + chunk)
    block_rows: torch.Tensor | None  # [kv_heads * blocks] block rows of the whole context; None if no earlier context
    causal_mask: torch.Tensor | None  # [chunk, context_len] bool; None when the chunk is the whole context


@dataclass
class AttentionMetadata:
    write_rows: torch.Tensor  # [kv_heads * T] rows of the [kv_heads * slots, head_dim] view, head-major
    num_decodes: int
    decode_block_rows: (
        torch.Tensor | None
    )  # [kv_heads * B * blocks] block rows of each decode's context (padded), torch path only
    decode_padding: torch.Tensor | None  # [1, B, 1, blocks * block_size] bool, True where a key is padding, torch path only
    prefills: list[PrefillChunk]
    decode_tables: torch.Tensor | None = None  # [B, blocks] int64 block tables (padded with block 0), for the kernels
    decode_lengths: torch.Tensor | None = None  # [B] int64 context length of each decode, its new token included


def paged_attention(
    q: torch.Tensor,  # [T, heads, head_dim]
    k: torch.Tensor,  # [T, kv_heads, head_dim]
    v: torch.Tensor,
    k_cache: torch.Tensor,  # [kv_heads, num_blocks, block_size, head_dim]
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Writes the step's K/V into the cache, then attends; returns [T, heads, head_dim]."""
    write_to_cache(k, v, k_cache, v_cache, meta)
    return attend(q, k, v, k_cache, v_cache, meta, scale)


def write_to_cache(k, v, k_cache, v_cache, meta: AttentionMetadata) -> None:
    # index_copy_, not `cache[idx] = x`: measured ~100x faster on CPU for these shapes
    # (advanced-index assignment takes a slow generic path).
    dim = k.shape[-1]
    k_cache.view(-1, dim).index_copy_(0, meta.write_rows, k.transpose(0, 1).reshape(-1, dim).to(k_cache.dtype))
    v_cache.view(-1, dim).index_copy_(0, meta.write_rows, v.transpose(0, 1).reshape(-1, dim).to(v_cache.dtype))


def attend(q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Attention over a cache that already holds this step's K/V; returns [T, heads, head_dim]."""
    nd = meta.num_decodes
    if not meta.prefills:
        if not nd:
            return torch.empty_like(q)
        return _decode_attention(q, k_cache, v_cache, meta, scale)
    out = torch.empty_like(q)
    if nd:
        out[:nd] = _decode_attention(q[:nd], k_cache, v_cache, meta, scale)
    for chunk in meta.prefills:
        out[chunk.start : chunk.end] = _prefill_attention(q, k, v, k_cache, v_cache, chunk, scale)
    return out


def _gather(cache: torch.Tensor, block_rows: torch.Tensor, groups: int) -> torch.Tensor:
    """[groups, blocks * block_size, head_dim]: whole blocks copied out, one row per (kv head, block)."""
    # index_select, not `cache[idx]`: measured ~6x faster on CPU for these shapes.
    kv_heads, num_blocks, block_size, dim = cache.shape
    return cache.view(kv_heads * num_blocks, block_size * dim).index_select(0, block_rows).view(groups, -1, dim)


def decode_in_place(device: torch.device, dtype: torch.dtype, head_dim: int, kv_dtype: torch.dtype | None = None) -> bool:
    """Whether decodes read the cache in place through our kernels (else the gathered torch path):
    float32 queries over a float32 or float16 cache on CPU."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and (kv_dtype or dtype) in (torch.float32, torch.float16)
        and head_dim % 8 == 0
        and kernels() is not None
    )


def _decode_attention(q, k_cache, v_cache, meta: AttentionMetadata, scale) -> torch.Tensor:
    """One query token per sequence."""
    if meta.decode_tables is not None and decode_in_place(q.device, q.dtype, q.shape[-1], k_cache.dtype):
        return _decode_attention_in_place(kernels(), q, k_cache, v_cache, meta, scale)
    return _decode_attention_gathered(q, k_cache, v_cache, meta.decode_block_rows, meta.decode_padding, scale)


def _decode_attention_in_place(cpp, q, k_cache, v_cache, meta: AttentionMetadata, scale) -> torch.Tensor:
    """Scores and weighted values read K/V blocks where they lie (no gathered copy); softmax between."""
    scores = cpp.paged_attention_scores(q.contiguous(), k_cache, meta.decode_tables, meta.decode_lengths, scale)
    probs = torch.softmax(scores, dim=-1)
    return cpp.paged_attention_values(probs, v_cache, meta.decode_tables, meta.decode_lengths)


def _decode_attention_gathered(q, k_cache, v_cache, block_rows, padding, scale) -> torch.Tensor:
    """Two batched matmuls over gathered blocks: beat SDPA's kernel ~5x at these sizes.

    Batched over (kv head, sequence) with the query heads of a group as rows (GQA), so K/V
    are never repeated and the gathered blocks feed the matmuls without a copy.
    """
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[0]
    group = heads // kv_heads
    keys = _gather(k_cache, block_rows, kv_heads * batch).to(q.dtype)  # [kv_heads * B, L, D]
    values = _gather(v_cache, block_rows, kv_heads * batch).to(q.dtype)
    grouped = q.view(batch, kv_heads, group, dim).transpose(0, 1).reshape(kv_heads * batch, group, dim)
    scores = torch.bmm(grouped, keys.transpose(1, 2)).float().mul_(scale)
    scores.view(kv_heads, batch, group, -1).masked_fill_(padding, float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(q.dtype)
    out = torch.bmm(weights, values)  # [kv_heads * B, group, D]
    return out.view(kv_heads, batch, group, dim).transpose(0, 1).reshape(batch, heads, dim)


def _as_stored(x: torch.Tensor, cache_dtype: torch.dtype) -> torch.Tensor:
    """x rounded as the cache stores it: every read of a token's K/V sees the same values, whether
    its prompt was prefilled in one chunk or several."""
    return x if x.dtype == cache_dtype else x.to(cache_dtype).to(x.dtype)


def _prefill_attention(q, k, v, k_cache, v_cache, chunk: PrefillChunk, scale) -> torch.Tensor:
    query = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, heads, n, D]
    if chunk.block_rows is None:  # the whole context is this chunk: attend to it directly, as the cache holds it
        keys = _as_stored(k[chunk.start : chunk.end].transpose(0, 1), k_cache.dtype)  # [kv_heads, L, D]
        values = _as_stored(v[chunk.start : chunk.end].transpose(0, 1), v_cache.dtype)
    else:
        kv_heads = k_cache.shape[0]
        keys = _gather(k_cache, chunk.block_rows, kv_heads)[:, : chunk.context_len].to(q.dtype)
        values = _gather(v_cache, chunk.block_rows, kv_heads)[:, : chunk.context_len].to(q.dtype)
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
