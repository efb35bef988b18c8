"""4-bit groups: Q4_1's minimum and scale, the embedded GGUF's weights given back, and which linears go 4-bit."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.int4_linear import Int4Linear, dequantize_groups, quantize_groups
from inference.engine.quantization import Int8Linear, apply_quantization


def test_groups_span_their_minimum_to_maximum_in_15_steps():
    torch.manual_seed(0)
    weight = torch.randn(6, 64)
    levels, scales, minimums = quantize_groups(weight)
    groups = weight.reshape(6, 2, 32)
    assert torch.equal(minimums, groups.amin(dim=2).half())
    assert torch.equal(scales, ((groups.amax(dim=2) - groups.amin(dim=2)) / 15).half())
    assert levels.min() == 0 and levels.max() == 15
    assert (dequantize_groups(levels, scales, minimums) - weight).abs().max() <= scales.float().max() * 0.51


def test_a_constant_group_needs_no_scale():
    weight = torch.full((2, 32), 0.25)
    levels, scales, minimums = quantize_groups(weight)
    assert torch.equal(dequantize_groups(levels, scales, minimums), weight) and not scales.float().any()


def test_gives_back_the_embedded_gguf_weights_exactly(real_hf_model):
    """The embedded model is Q4_1: re-quantizing its de-quantized layers loses nothing."""
    layers = [(name, m) for name, m in real_hf_model.named_modules() if isinstance(m, nn.Linear) and name != "lm_head"]
    assert len(layers) == 30 * 7  # q, k, v, o, gate, up, down
    for name, linear in layers:
        weight = linear.weight.detach().float()
        assert torch.equal(dequantize_groups(*quantize_groups(weight)), weight), name


def test_quantize_keeps_the_lm_head_and_odd_widths_for_int8():
    model = nn.Sequential(nn.Linear(64, 96), nn.Linear(96, 40))
    model.lm_head = nn.Linear(64, 100)
    model.odd = nn.Linear(40, 64)  # 40 inputs: not whole groups of 32
    apply_quantization(model, "int4", torch.device("cpu"))
    assert [type(m) for m in (model[0], model[1], model.lm_head, model.odd)] == [Int4Linear, Int4Linear, Int8Linear, Int8Linear]


def test_int4_linear_adds_the_bias_and_keeps_the_dtype():
    torch.manual_seed(1)
    linear = nn.Linear(64, 16)
    x = torch.randn(2, 3, 64)
    out = Int4Linear(linear)(x)
    assert out.shape == (2, 3, 16) and out.dtype == torch.float32
    expected = x.reshape(-1, 64) @ dequantize_groups(*quantize_groups(linear.weight)).T + linear.bias
    torch.testing.assert_close(out.reshape(-1, 16), expected, rtol=1e-3, atol=1e-3)


def test_refuses_weights_beyond_float16():
    with pytest.raises(ValueError, match="float16"):
        quantize_groups(torch.full((1, 32), 1e6) * torch.arange(32.0))
    with pytest.raises(ValueError, match="multiples of 32"):
        quantize_groups(torch.randn(2, 48))
