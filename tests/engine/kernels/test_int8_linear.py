"""The int8 kernel: right within float32 rounding, and exact per row whatever the batch."""
from __future__ import annotations

import pytest
import torch


def reference(x, weight, scales):
    return (x.double() @ (weight.double() * scales.double()[:, None]).T).float()


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 33])
@pytest.mark.parametrize("channels", [4, 13, 96])  # 13: a last block of fewer than four channels
def test_matches_dequantized_matmul(compiled, rows, channels):
    torch.manual_seed(rows * 100 + channels)
    x = torch.randn(rows, 72)
    weight = torch.randint(-127, 128, (channels, 72), dtype=torch.int8)
    scales = torch.rand(channels) / 100
    torch.testing.assert_close(compiled.int8_linear(x, [weight], [scales]), reference(x, weight, scales), rtol=1e-5, atol=1e-5)


def test_each_row_is_bit_identical_alone_and_in_any_batch(compiled):
    """Row pairs share weight loads, odd rows go alone: both paths must round the same."""
    torch.manual_seed(0)
    x = torch.randn(9, 256)
    weight = torch.randint(-127, 128, (37, 256), dtype=torch.int8)
    scales = torch.rand(37)
    whole = compiled.int8_linear(x, [weight], [scales])
    assert torch.equal(torch.cat([compiled.int8_linear(row[None].contiguous(), [weight], [scales]) for row in x]), whole)
    assert torch.equal(compiled.int8_linear(x[3:7].contiguous(), [weight], [scales]), whole[3:7])


def test_two_levels_in_one_call_equal_the_levels_summed(compiled):
    """The second Q/K/V level rides in the same call: each level scaled, then added in order."""
    torch.manual_seed(1)
    x = torch.randn(5, 64)
    first, second = (torch.randint(-127, 128, (12, 64), dtype=torch.int8) for _ in range(2))
    scales = [torch.rand(12), torch.rand(12) / 254]
    both = compiled.int8_linear(x, [first, second], scales)
    assert torch.equal(both, compiled.int8_linear(x, [first], scales[:1]) + compiled.int8_linear(x, [second], scales[1:]))


def test_rejects_what_it_cannot_compute(compiled):
    with pytest.raises(RuntimeError, match="multiple of 8"):
        compiled.int8_linear(torch.randn(1, 12), [torch.zeros(4, 12, dtype=torch.int8)], [torch.ones(4)])
    with pytest.raises(RuntimeError, match="int8"):
        compiled.int8_linear(torch.randn(1, 16), [torch.zeros(4, 16)], [torch.ones(4)])
