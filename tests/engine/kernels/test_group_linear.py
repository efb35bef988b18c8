"""The grouped kernel (4- and 8-bit weights, int8 activation groups): its documented arithmetic bit for bit,
the same bits per row whatever the batch or the ISA, and the packed layout."""

from __future__ import annotations

import pytest
import torch

from inference.engine.layers.linear.groups import quantize_groups, quantize_groups_8bit
from tests.support.engine_helpers import dequantize_groups

QUANTIZE = {4: quantize_groups, 8: quantize_groups_8bit}


def packed(cpp, weight, bits):
    return cpp.group_pack_weight(*QUANTIZE[bits](weight), bits)


def linear(cpp, x, weight, bits, isa="auto"):
    return cpp.group_linear(x, packed(cpp, weight, bits), weight.shape[0], bits, isa)


def activation_groups(x):
    """group_dot.h's activations: per group of 32, t = x * (127 / max |x|), q1 = round(t),
    q2 = round(128 * (t - q1)); x ~ e * (128 * q1 + q2) with e = max |x| / 127 / 128."""
    rows, K = x.shape
    groups = x.reshape(rows, K // 32, 32)
    top = groups.abs().amax(dim=2, keepdim=True)
    inverse = torch.where(top > 0, torch.full_like(top, 127) / top, torch.zeros_like(top))
    t = groups * inverse
    first = torch.round(t)
    second = torch.round((t - first) * 128)
    assert first.abs().max() <= 127 and second.abs().max() <= 64
    return (128 * first + second).long(), (top / 127 / 128).squeeze(2)


def documented_order(x, weight, bits):
    """group_dot.h's definition in float32: per row, channel and group in order,
    acc = fma(float(sum level * q), scale * e, acc); acc = fma(minimum, e * sum(q), acc), q = 128 * q1 + q2."""
    return documented_order_of_groups(x, *QUANTIZE[bits](weight))


def documented_order_of_groups(x, levels, scales, minimums):
    """documented_order over given levels (uint8 [N, K]), float16 scales and minimums ([N, K / 32])."""
    q, e = activation_groups(x)
    rows, groups = e.shape
    lv = levels.long().reshape(levels.shape[0], groups, 32)
    sums = torch.einsum("rgk,ngk->rng", q, lv)  # exact integers
    scaled_sum = e * q.sum(dim=2).float()  # one float32 rounding

    def fma(a, b, c):  # one rounding to float32 (products of these sizes are exact in float64)
        return (a.double() * b.double() + c.double()).float()

    acc = torch.zeros(rows, levels.shape[0])
    for g in range(groups):
        acc = fma(sums[:, :, g].float(), scales.float()[None, :, g] * e[:, None, g], acc)
        acc = fma(minimums.float()[None, :, g], scaled_sum[:, None, g], acc)
    return acc


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("rows", [1, 2, 3, 11, 12, 13, 25, 33])  # passes of up to 12 rows (AVX2: 2; AMX: 16), then what is left
@pytest.mark.parametrize("channels, K", [(16, 64), (13, 576), (40, 1536), (6, 32)])  # 13, 40, 6: a last block under 16
def test_every_isa_follows_the_documented_arithmetic_bit_for_bit(cpp, bits, rows, channels, K, isas):
    torch.manual_seed(rows * 100 + channels + bits)
    x, weight = torch.randn(rows, K), torch.randn(channels, K) / 10 + 0.05
    expected = documented_order(x, weight, bits)
    for isa in isas:  # the vector versions and, where the CPU has them, the AMX tiles
        assert torch.equal(linear(cpp, x, weight, bits, isa), expected), isa


@pytest.mark.parametrize("bits", [4, 8])
def test_close_to_the_dequantized_matmul(cpp, bits):
    """Two int8 levels make the activations 15-bit: the products are the de-quantized weight's to ~1e-4."""
    torch.manual_seed(3)
    x, weight = torch.randn(5, 576), torch.randn(64, 576) / 10
    exact = x.double() @ dequantize_groups(*QUANTIZE[bits](weight)).double().T
    error = (linear(cpp, x, weight, bits).double() - exact).norm() / exact.norm()
    assert error < 2e-4


def test_extreme_levels_and_activations_stay_exact(cpp, isas):
    """8-bit levels of 255 against activations at int8's end in every position: the widest integer sums
    (AVX2 and AVX-512BW add them as nibbles in int16 pairs, which must not saturate)."""
    levels = torch.full((16, 64), 255, dtype=torch.uint8)
    levels[::2] = 0
    scales = torch.full((16, 2), 0.5, dtype=torch.float16)
    minimums = torch.zeros(16, 2, dtype=torch.float16)
    weight = cpp.group_pack_weight(levels, scales, minimums, 8)
    x = torch.ones(2, 64)
    x[1] = -1
    for isa in isas:
        out = cpp.group_linear(x, weight, 16, 8, isa)
        expected = torch.tensor([[0.0, 255 * 0.5 * 64]] * 8).reshape(16)
        assert torch.equal(out[0], expected) and torch.equal(out[1], -expected), isa


@pytest.mark.parametrize("bits", [4, 8])
def test_each_row_is_bit_identical_alone_and_in_any_batch(cpp, isas, bits):
    torch.manual_seed(0)
    x, weight = torch.randn(37, 256), torch.randn(37, 256)
    for isa in isas:
        whole = linear(cpp, x, weight, bits, isa)
        for rows in range(1, 15):
            assert torch.equal(linear(cpp, x[:rows].contiguous(), weight, bits, isa), whole[:rows]), (isa, rows)
        assert torch.equal(torch.cat([linear(cpp, row[None].contiguous(), weight, bits, isa) for row in x]), whole), isa
        assert torch.equal(linear(cpp, x[3:18].contiguous(), weight, bits, isa), whole[3:18]), isa
    # "auto" takes the tiles from kGroupAmxMinRows (16) rows where the CPU has them, the vector version below
    assert torch.equal(linear(cpp, x, weight, bits), whole)
    assert torch.equal(torch.cat([linear(cpp, x[i : i + 2].contiguous(), weight, bits) for i in range(0, 37, 2)]), whole)


def test_prefetch_distance_changes_no_bits(cpp, restore_prefetch):
    torch.manual_seed(2)
    x, weight = torch.randn(3, 576), torch.randn(24, 576)
    cpp.set_weight_prefetch_bytes(0)
    plain = linear(cpp, x, weight, 4)
    for bytes_ahead in (64, 4096, 1 << 20):  # the last far past the weight's end
        cpp.set_weight_prefetch_bytes(bytes_ahead)
        assert torch.equal(linear(cpp, x, weight, 4), plain)


@pytest.mark.parametrize("bits", [4, 8])
def test_packing_keeps_every_level_scale_and_minimum(cpp, bits):
    """Blocks of 16 channels (the last padded with zero channels); a group's steps of 4 weights a
    channel, 64 bytes a step (4-bit: step p low nibbles, p + 4 high), then 16 scales, then 16 minimums."""
    torch.manual_seed(6)
    levels, scales, minimums = QUANTIZE[bits](torch.randn(20, 64))
    blocks = cpp.group_pack_weight(levels, scales, minimums, bits)
    level_bytes = 16 * 32 * bits // 8
    assert blocks.shape == (2, 2 * (level_bytes + 64))
    groups = blocks.reshape(2, 2, level_bytes + 64)  # block, group, bytes
    steps = groups[:, :, :level_bytes].reshape(2, 2, -1, 16, 4)  # block, group, vector, channel, weight
    if bits == 4:
        steps = torch.cat([steps & 15, steps >> 4], dim=2)
    got = steps.permute(0, 3, 1, 2, 4).reshape(32, 64)  # channel, group x step x weight
    assert torch.equal(got, torch.cat([levels, torch.zeros(12, 64, dtype=torch.uint8)]))
    halves = groups[:, :, level_bytes:].contiguous().view(torch.float16).reshape(2, 2, 2, 16)  # block, group, kind, channel
    for kind, values in enumerate((scales, minimums)):
        padded = torch.cat([values, torch.zeros(12, 2, dtype=torch.float16)])
        assert torch.equal(halves[:, :, kind, :].permute(0, 2, 1).reshape(32, 2), padded)


@pytest.mark.parametrize("bits", [4, 8])
def test_dequantized_rows_are_the_weight(cpp, bits):
    """The embedding lookup over a packed table gives scale * level + minimum, rounded once."""
    torch.manual_seed(7)
    weight = torch.randn(37, 96)
    table = packed(cpp, weight, bits)
    ids = torch.tensor([[36, 0], [17, 17]])
    expected = dequantize_groups(*QUANTIZE[bits](weight))[ids]
    assert torch.equal(cpp.group_dequantize_rows(table, ids, 96, bits), expected)
    with pytest.raises(RuntimeError, match="outside"):
        cpp.group_dequantize_rows(table, torch.tensor([48]), 96, bits)


def test_rejects_what_it_cannot_compute(cpp, isas):
    if "amx" not in isas:  # the AMX version only where the CPU (and its OS) offer the tiles
        with pytest.raises(RuntimeError, match="AMX"):
            linear(cpp, torch.randn(1, 64), torch.randn(4, 64), 4, "amx")
    levels, scales, minimums = quantize_groups(torch.randn(4, 64))
    with pytest.raises(RuntimeError, match="0..15"):
        cpp.group_pack_weight(levels + 16, scales, minimums, 4)
    with pytest.raises(RuntimeError, match="bits"):
        cpp.group_pack_weight(levels, scales, minimums, 6)
    weight = cpp.group_pack_weight(levels, scales, minimums, 4)
    with pytest.raises(RuntimeError, match="K is not"):
        cpp.group_linear(torch.randn(1, 32), weight, 4, 4)
    with pytest.raises(RuntimeError, match="out_features"):
        cpp.group_linear(torch.randn(1, 64), weight, 17, 4)
