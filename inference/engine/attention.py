"""Attention over the paged KV cache.

Every layer's cache is a flat tensor of token slots, `[num_blocks * block_size, kv_heads, head_dim]`;
a sequence's block table maps its positions to slots. Each step first writes the new tokens'
K/V into their slots, then reads each sequence's whole context back through its slots.

A step's tokens are laid out decodes first (one token per sequence, attended in one batched
SDPA call), then prefill chunks (one SDPA call each, causal with an offset when earlier
chunks or cached prefix blocks are already in the cache).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PrefillChunk:
    start: int  # first token of the chunk in the step's flat token list
    end: int
    context_len: int  # tokens of this sequence in the cache after this step (cached + chunk)
    slot_ids: torch.Tensor | None  # [context_len] cache slots of the whole context; None if no earlier context
    causal_mask: torch.Tensor | None  # [chunk, context_len] bool; None when the chunk is the whole context


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] cache slot each new token's K/V is written to
    num_decodes: int
    decode_slot_ids: torch.Tensor | None  # [B, Lmax] slots of each decoding sequence's context (padded)
    decode_padding: torch.Tensor | None  # [B, 1, 1, Lmax] bool, True where a key is padding
    prefills: list[PrefillChunk]


def paged_attention(
    q: torch.Tensor,  # [T, heads, head_dim]
    k: torch.Tensor,  # [T, kv_heads, head_dim]
    v: torch.Tensor,
    k_cache: torch.Tensor,  # [slots, kv_heads, head_dim]
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Returns [T, heads, head_dim]."""
    # index_copy_/index_select, not `cache[idx] = x` / `cache[idx]`: measured ~100x and ~6x
    # faster on CPU for these shapes (advanced-index assignment takes a slow generic path).
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    nd = meta.num_decodes
    if nd:
        out[:nd] = _decode_attention(q[:nd], k_cache, v_cache, meta.decode_slot_ids, meta.decode_padding, scale)
    for chunk in meta.prefills:
        out[chunk.start : chunk.end] = _prefill_attention(q, k, v, k_cache, v_cache, chunk, scale)
    return out


def _gather(cache: torch.Tensor, slot_ids: torch.Tensor) -> torch.Tensor:
    return cache.index_select(0, slot_ids.reshape(-1)).view(*slot_ids.shape, *cache.shape[1:])


def _decode_attention(q, k_cache, v_cache, slot_ids, padding, scale) -> torch.Tensor:
    """One query token per sequence: two batched matmuls beat SDPA's kernel ~5x at these sizes.

    Query heads are grouped under their KV head (GQA) so K/V are never repeated.
    """
    batch, heads, dim = q.shape
    keys = _gather(k_cache, slot_ids).permute(0, 2, 3, 1)  # [B, kv_heads, D, L]
    values = _gather(v_cache, slot_ids).transpose(1, 2)  # [B, kv_heads, L, D]
    kv_heads = keys.shape[1]
    grouped = q.view(batch, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, keys).float() * scale  # [B, kv_heads, group, L]
    scores.masked_fill_(padding, float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(q.dtype)
    return torch.matmul(weights, values).view(batch, heads, dim)


def _prefill_attention(q, k, v, k_cache, v_cache, chunk: PrefillChunk, scale) -> torch.Tensor:
    query = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, heads, n, D]
    if chunk.slot_ids is None:  # the whole context is this chunk: attend to it directly
        keys, values = k[chunk.start : chunk.end], v[chunk.start : chunk.end]
    else:
        keys, values = _gather(k_cache, chunk.slot_ids), _gather(v_cache, chunk.slot_ids)
    keys = keys.transpose(0, 1).unsqueeze(0)  # [1, kv_heads, L, D]
    values = values.transpose(0, 1).unsqueeze(0)
    attended = F.scaled_dot_product_attention(
        query,
        keys,
        values,
        attn_mask=chunk.causal_mask,
        is_causal=chunk.causal_mask is None,
        scale=scale,
        enable_gqa=query.shape[1] != keys.shape[1],
    )
    return attended.squeeze(0).transpose(0, 1)
