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
    decode_mask: torch.Tensor | None  # [B, 1, 1, Lmax] bool, True where a key is real
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
    k_cache[meta.slot_mapping] = k
    v_cache[meta.slot_mapping] = v
    gqa = q.shape[1] != k.shape[1]
    out = torch.empty_like(q)

    nd = meta.num_decodes
    if nd:
        keys = k_cache[meta.decode_slot_ids].transpose(1, 2)  # [B, kv_heads, Lmax, D]
        values = v_cache[meta.decode_slot_ids].transpose(1, 2)
        query = q[:nd].unsqueeze(2)  # [B, heads, 1, D]
        attended = F.scaled_dot_product_attention(
            query, keys, values, attn_mask=meta.decode_mask, scale=scale, enable_gqa=gqa
        )
        out[:nd] = attended.squeeze(2)

    for chunk in meta.prefills:
        query = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, heads, n, D]
        if chunk.slot_ids is None:
            keys = k[chunk.start : chunk.end]
            values = v[chunk.start : chunk.end]
        else:
            keys = k_cache[chunk.slot_ids]
            values = v_cache[chunk.slot_ids]
        keys = keys.transpose(0, 1).unsqueeze(0)  # [1, kv_heads, L, D]
        values = values.transpose(0, 1).unsqueeze(0)
        attended = F.scaled_dot_product_attention(
            query,
            keys,
            values,
            attn_mask=chunk.causal_mask,
            is_causal=chunk.causal_mask is None,
            scale=scale,
            enable_gqa=gqa,
        )
        out[chunk.start : chunk.end] = attended.squeeze(0).transpose(0, 1)
    return out
