"""The in-place RoPE kernel rounds exactly as the torch expression it replaces."""

from __future__ import annotations

import torch

from inference.engine.layers.rotary import RotaryEmbedding, rotated


def test_rotates_a_strided_view_in_place_bit_exactly(cpp):
    torch.manual_seed(0)
    heads, kv_heads, dim = 9, 3, 64
    qkv = torch.randn(7, heads + 2 * kv_heads, dim)
    untouched_v = qkv[:, heads + kv_heads :].clone()
    rope = RotaryEmbedding(dim, 128, {"rope_theta": 10000.0, "rope_type": "default"}).tables(
        torch.tensor([0, 1, 5, 17, 40, 41, 127]), torch.float32
    )
    cos, sin = rope.cos, rope.sin
    qk = qkv[:, : heads + kv_heads]  # the view the attention layer rotates: not contiguous
    expected = rotated(qk, cos, sin)
    cpp.rotary_inplace(qk, cos.contiguous(), sin.contiguous())
    assert torch.equal(qkv[:, : heads + kv_heads], expected)
    assert torch.equal(qkv[:, heads + kv_heads :], untouched_v)
