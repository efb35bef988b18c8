"""The block kernel over GGUF's k-quant, 5-bit and IQ4 types (kernels/blocks/): each type decoded
exactly as gguf-py de-quantizes it, products within float32 rounding of a float64 reference over
the same int8 activations, the same bits on every ISA and in every batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.gguf_blocks import KERNEL_TYPES, SCALE_FIELDS, dequantized, random_blocks


def raw_tensor(raw: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(raw).reshape(-1))


def activation_blocks(x: torch.Tensor, S: int) -> torch.Tensor:
    """block_dot.h's activations, de-quantized: per block of S, dx = max |x| / 127, q = round(x / dx)."""
    rows, K = x.shape
    blocks = x.reshape(rows, K // S, S)
    top = blocks.abs().amax(dim=2, keepdim=True)
    inverse = torch.where(top > 0, torch.full_like(top, 127) / top, torch.zeros_like(top))
    q = torch.round(blocks * inverse)
    return (q.double() * (top / 127).double()).reshape(rows, K)


@pytest.mark.parametrize("kind", list(SCALE_FIELDS))
def test_dequantized_rows_equal_gguf_py_bit_for_bit(cpp, kind):
    S = SCALE_FIELDS[kind][0]
    raw = random_blocks(kind, 9, 2 * max(S, 64), seed=len(kind))
    reference = dequantized(kind, raw, 2 * max(S, 64))
    ids = torch.tensor([[8, 0], [3, 3]])
    rows = cpp.gguf_dequantize_rows(raw_tensor(raw), 2 * max(S, 64), kind, ids)
    assert torch.equal(rows, torch.from_numpy(reference)[ids])
    with pytest.raises(RuntimeError, match="outside"):
        cpp.gguf_dequantize_rows(raw_tensor(raw), 2 * max(S, 64), kind, torch.tensor([9]))


@pytest.mark.parametrize("kind", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
def test_blocks_gguf_py_quantized_dequantize_as_gguf_py_does(cpp, kind):
    """The types gguf-py can write itself, from real-valued weights (not random bytes)."""
    from gguf import GGMLQuantizationType, quants

    weights = np.random.default_rng(3).normal(0, 0.05, size=(7, 256)).astype(np.float32)
    raw = quants.quantize(weights, GGMLQuantizationType[kind.upper()])
    ids = torch.tensor([6, 0, 3])
    expected = torch.from_numpy(dequantized(kind, raw, 256))[ids]
    assert torch.equal(cpp.gguf_dequantize_rows(raw_tensor(raw), 256, kind, ids), expected)


@pytest.mark.parametrize("kind", ["f32", "f16", "bf16"])
def test_float_rows_are_the_file_values(cpp, kind):
    values = torch.randn(5, 64)
    stored = values.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[kind])
    raw = stored.contiguous().view(torch.uint8).reshape(-1)
    assert torch.equal(cpp.gguf_dequantize_rows(raw, 64, kind, torch.tensor([4, 1])), stored.float()[[4, 1]])


@pytest.mark.parametrize("kind", KERNEL_TYPES)
@pytest.mark.parametrize("rows", [1, 3, 12, 13, 33])  # passes of up to 12 rows (AVX2: 2; AMX: 16), then what is left
def test_products_match_a_float64_reference_on_every_isa(cpp, kind, rows, isas):
    S = SCALE_FIELDS[kind][0]
    channels, K = 21, 2 * 256  # 21: a last block of 5 channels
    raw = random_blocks(kind, channels, K, seed=rows)
    packed = cpp.block_pack([raw_tensor(raw)], K, kind)
    torch.manual_seed(rows)
    x = torch.randn(rows, K)
    exact = activation_blocks(x, S) @ torch.from_numpy(dequantized(kind, raw, K)).double().T
    magnitude = activation_blocks(x, S).abs() @ torch.from_numpy(dequantized(kind, raw, K)).double().abs().T
    first = None
    for isa in isas:  # the vector versions and, where the CPU has them, the AMX tiles
        out = cpp.block_linear(x, packed, channels, kind, isa)
        assert ((out.double() - exact).abs() <= 1e-6 * magnitude + 1e-30).all(), isa
        first = out if first is None else first
        assert torch.equal(out, first), isa  # every ISA: the same bits


@pytest.mark.parametrize("kind", ["q4_k", "q6_k", "iq4_xs", "q5_1"])
def test_each_row_is_bit_identical_alone_and_in_any_batch(cpp, kind, isas):
    K = 512
    raw = random_blocks(kind, 37, K, seed=4)
    packed = cpp.block_pack([raw_tensor(raw)], K, kind)
    torch.manual_seed(0)
    x = torch.randn(35, K)
    for isa in isas:
        whole = cpp.block_linear(x, packed, 37, kind, isa)
        for rows in (1, 2, 7, 9, 17):
            assert torch.equal(cpp.block_linear(x[:rows].contiguous(), packed, 37, kind, isa), whole[:rows]), (isa, rows)
        assert torch.equal(cpp.block_linear(x[5:16].contiguous(), packed, 37, kind, isa), whole[5:16]), isa
    # "auto" takes the tiles from kBlockAmxMinRows (16) rows where the CPU has them, the vector version below
    assert torch.equal(cpp.block_linear(x, packed, 37, kind), whole)
    assert torch.equal(torch.cat([cpp.block_linear(x[i : i + 3].contiguous(), packed, 37, kind) for i in range(0, 35, 3)]), whole)


def test_parts_pack_as_their_rows_fused_in_the_given_order(cpp):
    """A fused gate/up (two tensors) or a Q with its rotary halves un-interleaved: the same weight as the rows fused by hand."""
    K = 256
    first, second = random_blocks("q6_k", 5, K, seed=1), random_blocks("q6_k", 3, K, seed=2)
    order = torch.tensor([7, 0, 2, 1, 3, 4, 6, 5])
    by_hand = np.concatenate([first, second])[order.numpy()]
    x = torch.randn(3, K)
    fused = cpp.block_linear(x, cpp.block_pack([raw_tensor(first), raw_tensor(second)], K, "q6_k", order), 8, "q6_k")
    assert torch.equal(fused, cpp.block_linear(x, cpp.block_pack([raw_tensor(by_hand)], K, "q6_k"), 8, "q6_k"))


def test_extreme_levels_and_activations_stay_exact(cpp, isas):
    """Q6_K's largest levels and scales against int8's end: the widest integer sums (AVX2 and
    AVX-512BW add them in int16 pairs, which must not saturate)."""
    raw = random_blocks("q6_k", 16, 256, seed=1).copy()
    raw[:, :192] = 0xFF  # every level 63
    raw[:, 192:208] = np.uint8(127)  # every sub-block scale 127
    x = torch.ones(2, 256)
    x[1] = -1
    reference = activation_blocks(x, 256) @ torch.from_numpy(dequantized("q6_k", raw, 256)).double().T
    for isa in isas:
        out = cpp.block_linear(x, cpp.block_pack([raw_tensor(raw)], 256, "q6_k"), 16, "q6_k", isa)
        assert torch.allclose(out.double(), reference, rtol=1e-6), isa


def test_rejects_what_it_cannot_compute(cpp, isas):
    raw = raw_tensor(random_blocks("q4_k", 4, 256))
    with pytest.raises(RuntimeError, match="whole blocks"):
        cpp.block_pack([raw], 128, "q4_k")
    with pytest.raises(RuntimeError, match="whole"):
        cpp.block_pack([raw[:100]], 256, "q4_k")
    with pytest.raises(RuntimeError, match="group kernel"):
        cpp.block_pack([raw_tensor(random_blocks("q8_0", 4, 256))], 256, "q8_0")
    with pytest.raises(RuntimeError, match="no kernel reads"):
        cpp.block_pack([raw], 256, "iq2_xxs")
    with pytest.raises(RuntimeError, match="outside"):
        cpp.block_pack([raw], 256, "q4_k", torch.tensor([0, 1, 2, 4]))
    packed = cpp.block_pack([raw], 256, "q4_k")
    with pytest.raises(RuntimeError, match="packed"):
        cpp.block_linear(torch.randn(1, 256), packed, 17, "q4_k")
    if "amx" not in isas:  # the AMX version only where the CPU (and its OS) offer the tiles
        with pytest.raises(RuntimeError, match="AMX"):
            cpp.block_linear(torch.randn(1, 256), packed, 4, "q4_k", "amx")
