"""The 4-bit kernel: close to the de-quantized weight's product, and the same bits per row whatever the batch or the ISA."""
from __future__ import annotations

import pytest
import torch

from inference.engine.int4_linear import dequantize_groups, quantize_groups
from tests.engine.kernels.test_int8_linear import rounded_rows


def packed(compiled, weight):
    return compiled.int4_pack_weight(*quantize_groups(weight))


def linear(compiled, x, weight, isa="auto"):
    return compiled.int4_linear(x, packed(compiled, weight), weight.shape[0], isa)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 6, 7, 33])  # passes of up to 4 rows (AVX2: 2), then what is left
@pytest.mark.parametrize("channels, K", [(4, 64), (13, 576), (96, 1536), (6, 32)])  # 13: a last block of fewer than four
def test_matches_the_dequantized_matmul(compiled, rows, channels, K, vector_isas):
    torch.manual_seed(rows * 100 + channels)
    x, weight = torch.randn(rows, K), torch.randn(channels, K) / 10
    expected = rounded_rows(x) @ dequantize_groups(*quantize_groups(weight)).double().T
    for isa in vector_isas:
        torch.testing.assert_close(linear(compiled, x, weight, isa), expected.float(), rtol=1e-5, atol=1e-5)


def test_minimums_count_as_much_as_the_levels(compiled):
    """Weights all above zero: the minimum term is most of every output, so dropping it cannot pass."""
    torch.manual_seed(5)
    x, weight = torch.randn(3, 128), torch.rand(8, 128) + 2
    expected = (rounded_rows(x) @ dequantize_groups(*quantize_groups(weight)).double().T).float()
    torch.testing.assert_close(linear(compiled, x, weight), expected, rtol=1e-5, atol=1e-5)


def test_every_isa_gives_the_same_bits(compiled, vector_isas):
    torch.manual_seed(4)
    x, weight = torch.randn(7, 1536), torch.randn(41, 1536)
    outputs = [linear(compiled, x, weight, isa) for isa in vector_isas]
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])


def test_each_row_is_bit_identical_alone_and_in_any_batch(compiled, vector_isas):
    """Rows go through in passes of up to 4 (AVX2: 2) and then what is left: every split rounds the same."""
    torch.manual_seed(0)
    x, weight = torch.randn(9, 256), torch.randn(37, 256)
    for isa in vector_isas:
        whole = linear(compiled, x, weight, isa)
        for rows in range(1, 8):
            assert torch.equal(linear(compiled, x[:rows].contiguous(), weight, isa), whole[:rows]), (isa, rows)
        assert torch.equal(torch.cat([linear(compiled, row[None].contiguous(), weight, isa) for row in x]), whole), isa
        assert torch.equal(linear(compiled, x[3:8].contiguous(), weight, isa), whole[3:8]), isa


def documented_order(x, weight):
    """int4_dot.h's definition, step by step in float32: per channel, 4 lanes each summing 8 exact
    products per group, fused into the lane by the scale, then the minimum times the lane's x sum,
    group after group; then (lane0 + lane1) + (lane2 + lane3), times the row's scale."""
    levels, scales, minimums = quantize_groups(weight)
    top = x.abs().amax(dim=1, keepdim=True)
    inverse = torch.where(top > 0, torch.full_like(top, 32767) / top, torch.zeros_like(top))
    rounded = torch.round(x * inverse).long()  # the int16 rows
    row_scale = top / 32767
    rows, K = x.shape
    groups = K // 32
    lane_of = torch.tensor([k for e in range(32) for k in [(e % 16) // 4]])  # element -> lane
    xg, qg = rounded.reshape(rows, groups, 32), levels.long().reshape(-1, groups, 32)
    sums = torch.zeros(rows, qg.shape[0], groups, 4, dtype=torch.long)
    x_sums = torch.zeros(rows, groups, 4, dtype=torch.long)
    for e in range(32):
        sums[..., lane_of[e]] += xg[:, None, :, e] * qg[None, :, :, e]
        x_sums[..., lane_of[e]] += xg[:, :, e]

    def fma(a, b, c):  # one rounding to float32 (products of these sizes are exact in float64)
        return (a.double() * b.double() + c.double()).float()

    lanes = torch.zeros(rows, qg.shape[0], 4)
    for g in range(groups):
        lanes = fma(sums[:, :, g, :].float(), scales.float()[None, :, g, None], lanes)
        lanes = fma(x_sums[:, None, g, :].float(), minimums.float()[None, :, g, None], lanes)
    totals = (lanes[..., 0] + lanes[..., 1]) + (lanes[..., 2] + lanes[..., 3])
    return totals * row_scale


def test_every_isa_follows_the_documented_float_order_bit_for_bit(compiled, vector_isas):
    """Pins int4_dot.h's order: a lane or a minimum term in the wrong place would still agree to 1e-5."""
    torch.manual_seed(8)
    x, weight = torch.randn(5, 96), torch.randn(6, 96) + 0.5
    expected = documented_order(x, weight)
    for isa in vector_isas:
        assert torch.equal(linear(compiled, x, weight, isa), expected), isa


def test_prefetch_distance_changes_no_bits(compiled, restore_prefetch):
    torch.manual_seed(2)
    x, weight = torch.randn(3, 576), torch.randn(24, 576)
    compiled.int8_set_prefetch_bytes(0)
    plain = linear(compiled, x, weight)
    for bytes_ahead in (64, 4096, 1 << 20):  # the last far past the weight's end
        compiled.int8_set_prefetch_bytes(bytes_ahead)
        assert torch.equal(linear(compiled, x, weight), plain)


def test_packing_keeps_every_level_scale_and_minimum(compiled):
    """A block of 4 channels (the 5th and 6th padded with zero ones), each group 80 bytes: every channel's
    16 bytes of nibbles (weight i low, 16 + i high), then the 4 scales, then the 4 minimums."""
    torch.manual_seed(6)
    levels, scales, minimums = quantize_groups(torch.randn(6, 64))
    blocks = compiled.int4_pack_weight(levels, scales, minimums)
    assert blocks.shape == (2, 2 * 80)
    groups = blocks.reshape(2, 2, 80)  # block, group, bytes
    nibbles = groups[:, :, :64].reshape(2, 2, 4, 16).transpose(1, 2).reshape(8, 2, 16)  # channel, group, byte
    expected = torch.cat([levels, torch.zeros(2, 64, dtype=torch.uint8)]).reshape(8, 2, 32)
    assert torch.equal(nibbles & 15, expected[:, :, :16]) and torch.equal(nibbles >> 4, expected[:, :, 16:])
    halves = groups[:, :, 64:].contiguous().view(torch.float16).reshape(2, 2, 2, 4)  # block, group, scale or minimum, channel
    for kind, values in enumerate((scales, minimums)):
        padded = torch.cat([values, torch.zeros(2, 2, dtype=torch.float16)])
        assert torch.equal(halves[:, :, kind, :].transpose(1, 2).reshape(8, 2), padded)


def test_rejects_what_it_cannot_compute(compiled):
    with pytest.raises(RuntimeError, match="AMX"):  # no AMX version: refused, whether or not this CPU has AMX
        linear(compiled, torch.randn(1, 64), torch.randn(4, 64), "amx")
    levels, scales, minimums = quantize_groups(torch.randn(4, 64))
    with pytest.raises(RuntimeError, match="0..15"):
        compiled.int4_pack_weight(levels + 16, scales, minimums)
    weight = compiled.int4_pack_weight(levels, scales, minimums)
    with pytest.raises(RuntimeError, match="disagree on K"):
        compiled.int4_linear(torch.randn(1, 32), weight, 4)
    with pytest.raises(RuntimeError, match="out_features"):
        compiled.int4_linear(torch.randn(1, 64), weight, 5)
