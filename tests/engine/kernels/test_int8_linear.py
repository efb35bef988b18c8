"""The int8 kernel: exact integer sums, so the same bits per row whatever the batch or the ISA."""

from __future__ import annotations

import pytest
import torch

INT16_MAX = 32767


def rounded_rows(x):
    """What the kernel computes with: each row rounded to int16 steps of max|row| / 32767."""
    top = x.abs().amax(dim=1, keepdim=True)
    # a true division: `32767 / tensor` would be reciprocal-then-multiply, a different rounding
    inverse = torch.where(top > 0, torch.full_like(top, INT16_MAX) / top, torch.zeros_like(top))
    return torch.round(x * inverse).double() * (top / INT16_MAX).double()


def reference(x, weight, scales):
    return (rounded_rows(x) @ (weight.double() * scales.double()[:, None]).T).float()


def linear(cpp, x, weights, scales, isa="auto"):
    """The kernel over plain int8 weights, packed first as Int8Linear packs them (for `isa`'s layout)."""
    return cpp.int8_linear(x, [cpp.int8_pack_weight(weight, isa) for weight in weights], scales, isa)


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 33])
@pytest.mark.parametrize("channels", [4, 13, 96])  # 13: a last block of fewer than four channels
def test_matches_dequantized_matmul(cpp, rows, channels):
    torch.manual_seed(rows * 100 + channels)
    x = torch.randn(rows, 72)
    weight = torch.randint(-127, 128, (channels, 72), dtype=torch.int8)
    scales = torch.rand(channels) / 100
    torch.testing.assert_close(linear(cpp, x, [weight], [scales]), reference(x, weight, scales), rtol=1e-5, atol=1e-5)


def test_int16_rounding_of_activations_stays_far_below_the_int8_weights_error(cpp):
    torch.manual_seed(3)
    x = torch.randn(4, 576)
    weight = torch.randint(-127, 128, (64, 576), dtype=torch.int8)
    exact = (x.double() @ weight.double().T).float()
    error = (linear(cpp, x, [weight], [torch.ones(64)]) - exact).abs().max()
    assert error < 1e-4 * exact.abs().max()


@pytest.mark.parametrize("K", [8, 72, 576, 8200])  # 8200: past one exact int32 chunk, with a scalar tail
def test_integer_sums_are_exact_even_where_int32_lanes_would_overflow(cpp, K, isas):
    """Rows whose largest value is 32767 round to themselves, so the output is the exact integer dot product."""
    torch.manual_seed(K)
    x = torch.randint(-INT16_MAX, INT16_MAX + 1, (3, K)).float()
    x[:, 0] = INT16_MAX
    weight = torch.randint(-127, 128, (6, K), dtype=torch.int8)
    weight[:, : K // 2] = 127
    x[:, : K // 2] = INT16_MAX  # sums far beyond 2^31
    exact = (x.long() @ weight.long().T).float()  # int64, then rounded once to float32
    for isa in isas:
        assert torch.equal(linear(cpp, x, [weight], [torch.ones(6)], isa), exact)


def test_every_isa_gives_the_same_bits(cpp, isas):
    torch.manual_seed(4)
    x = torch.randn(7, 1536)
    weight = torch.randint(-127, 128, (41, 1536), dtype=torch.int8)
    scales = torch.rand(41)
    outputs = [linear(cpp, x, [weight], [scales], isa) for isa in isas]
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])


def test_each_row_is_bit_identical_alone_and_in_any_batch(cpp):
    """Vector versions: row pairs share weight loads, odd rows go alone; AMX: tiles of rows. Every split must round the same."""
    torch.manual_seed(0)
    x = torch.randn(9, 256)
    weight = torch.randint(-127, 128, (37, 256), dtype=torch.int8)
    scales = torch.rand(37)
    whole = linear(cpp, x, [weight], [scales])
    assert torch.equal(torch.cat([linear(cpp, row[None].contiguous(), [weight], [scales]) for row in x]), whole)
    assert torch.equal(linear(cpp, x[3:7].contiguous(), [weight], [scales]), whole[3:7])


def test_two_levels_in_one_call_equal_the_levels_summed(cpp, isas):
    """The second Q/K/V level rides in the same call: each level scaled, then added in order."""
    torch.manual_seed(1)
    x = torch.randn(5, 64)
    first, second = (torch.randint(-127, 128, (12, 64), dtype=torch.int8) for _ in range(2))
    scales = [torch.rand(12), torch.rand(12) / 254]
    for isa in isas:
        both = linear(cpp, x, [first, second], scales, isa)
        assert torch.equal(both, linear(cpp, x, [first], scales[:1], isa) + linear(cpp, x, [second], scales[1:], isa)), isa


@pytest.mark.parametrize("rows", [1, 5, 16, 17, 31, 33, 48])  # AMX: tiles of up to 16 rows, of equal height
def test_amx_gives_the_vector_versions_bits_for_any_rows(cpp, amx, rows):
    """Channels and K not whole tiles (a last block of 5, K padded from 200 to 256)."""
    torch.manual_seed(rows)
    x = torch.randn(rows, 200)
    weight = torch.randint(-128, 128, (37, 200), dtype=torch.int8)  # -128 too: the low bytes' largest products
    scales = torch.rand(37)
    assert torch.equal(linear(cpp, x, [weight], [scales], "amx"), linear(cpp, x, [weight], [scales], "avx512_vnni"))


def test_amx_low_byte_sums_stay_exact_at_the_widest_k_it_takes(cpp, amx):
    """K = 65536 with every low byte 255 (x = 255) against -128: the low tile sums reach 65536 * 255 * 128, just below 2^31."""
    K = 65536
    x = torch.full((2, K), 255.0)
    x[:, 0] = INT16_MAX  # rows round to themselves
    x[1, 1::2] = -1.0  # low byte 255, high byte -1
    weight = torch.full((3, K), -128, dtype=torch.int8)
    exact = (x.long() @ weight.long().T).float()
    assert torch.equal(linear(cpp, x, [weight], [torch.ones(3)], "amx"), exact)


def test_auto_packs_rows_wider_than_amx_takes_for_the_vector_versions(cpp, amx):
    weight = torch.randint(-127, 128, (4, 65544), dtype=torch.int8)
    assert cpp.int8_pack_weight(weight).dim() == 2  # the vector layout: same shape as the weight
    with pytest.raises(RuntimeError, match="K up to"):
        cpp.int8_pack_weight(weight, "amx")
    x = torch.randn(1, 65544)
    torch.testing.assert_close(
        cpp.int8_linear(x, [cpp.int8_pack_weight(weight)], [torch.ones(4)]),
        reference(x, weight, torch.ones(4)),
        rtol=1e-5,
        atol=1e-3,
    )


def test_no_rows_give_no_outputs_but_a_bad_isa_is_still_refused(cpp, isas):
    weight = torch.randint(-127, 128, (4, 64), dtype=torch.int8)
    for isa in isas:
        assert linear(cpp, torch.randn(0, 64), [weight], [torch.ones(4)], isa).shape == (0, 4)
    with pytest.raises(RuntimeError, match="isa"):
        cpp.int8_linear(torch.randn(0, 64), [cpp.int8_pack_weight(weight, "avx2")], [torch.ones(4)], "sse2")


def test_amx_layout_is_one_tile_of_16_channels_per_64_k(cpp, amx):
    """Step s of block b: tile row r holds weights 64s + 4r .. 64s + 4r + 3 of each of the block's 16 channels."""
    weight = torch.arange(20 * 72, dtype=torch.int64).remainder(251).sub(125).to(torch.int8).reshape(20, 72)
    packed = cpp.int8_pack_weight(weight, "amx")
    assert packed.shape == (2, 2, 1024)  # 20 channels: 2 blocks; K = 72: 2 steps of 64, the second padded
    padded = torch.zeros(32, 128, dtype=torch.int8)
    padded[:20, :72] = weight
    # [block, channel n, step, row r, i] -> [block, step, row r, channel n, i]
    expected = padded.reshape(2, 16, 2, 16, 4).permute(0, 2, 3, 1, 4).reshape(2, 2, 1024)
    assert torch.equal(packed, expected)


def test_weights_go_only_to_the_version_they_were_packed_for(cpp, amx):
    weight, x = torch.zeros(4, 64, dtype=torch.int8), torch.randn(1, 64)
    with pytest.raises(RuntimeError, match="cannot read weights packed for amx"):
        cpp.int8_linear(x, [cpp.int8_pack_weight(weight, "amx")], [torch.ones(4)], "avx512_vnni")
    with pytest.raises(RuntimeError, match="cannot read weights packed for the vector versions"):
        cpp.int8_linear(x, [cpp.int8_pack_weight(weight, "avx2")], [torch.ones(4)], "amx")


def test_the_isa_cap_caps_the_choice(cpp):
    """What EngineConfig.cpu_isa (MINIVLLM_CPU_ISA) sets: capped to avx2, the kernels pack for and run avx2 alone."""
    best = cpp.linear_isa()
    try:
        cpp.set_isa_cap("avx2")
        w = cpp.int8_pack_weight(torch.zeros(4, 64, dtype=torch.int8))
        assert (cpp.linear_isa(), cpp.vector_isa(), w.dim()) == ("avx2", "avx2", 2)
        with pytest.raises(RuntimeError, match="ISA cap"):
            cpp.set_isa_cap("sse2")
    finally:
        cpp.set_isa_cap("auto")
    assert cpp.linear_isa() == best


def test_rejects_what_it_cannot_compute(cpp):
    with pytest.raises(RuntimeError, match="multiple of 8"):
        cpp.int8_linear(torch.randn(1, 12), [torch.zeros(4, 12, dtype=torch.int8)], [torch.ones(4)])
    with pytest.raises(RuntimeError, match="multiple of 8"):
        cpp.int8_pack_weight(torch.zeros(4, 12, dtype=torch.int8))
    with pytest.raises(RuntimeError, match="int8"):
        cpp.int8_linear(torch.randn(1, 16), [torch.zeros(4, 16)], [torch.ones(4)])
    with pytest.raises(RuntimeError, match="isa"):
        cpp.int8_linear(torch.randn(1, 16), [torch.zeros(4, 16, dtype=torch.int8)], [torch.ones(4)], "sse2")


def test_the_prefetch_distance_changes_no_bits(cpp, restore_prefetch, isas):
    """Rows and channels past the weight's end included: 1 MB ahead points far outside it."""
    torch.manual_seed(5)
    x = torch.randn(5, 1544)  # a tail of 8 past the last group of 32
    weight = torch.randint(-127, 128, (67, 1544), dtype=torch.int8)
    scales = torch.rand(67)
    outputs = []
    for bytes_ahead in (0, 64, 4096, 1 << 20):
        cpp.set_weight_prefetch_bytes(bytes_ahead)
        assert cpp.weight_prefetch_bytes() == bytes_ahead
        outputs += [linear(cpp, x, [weight], [scales], isa) for isa in isas]
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])


@pytest.mark.parametrize("bytes_ahead", [-64, 100])
def test_a_prefetch_distance_is_whole_cache_lines(cpp, restore_prefetch, bytes_ahead):
    with pytest.raises(RuntimeError, match="cache lines"):
        cpp.set_weight_prefetch_bytes(bytes_ahead)
