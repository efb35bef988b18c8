"""Weight-only int8 per channel: close to the float weights, exact per row, Q/K/V in two levels."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.layers import linear as formats
from inference.engine.layers.linear import FormatChoice, prepare_linears
from inference.engine.layers.linear.int8 import Int8Linear, quantize_int8


@pytest.mark.usefixtures("needs_cpu_kernels")  # Int8Linear packs for the int8 kernel
def test_int8_linear_matches_float_within_quantization_error():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32, bias=True)
    x = torch.randn(4, 64)
    quantized = Int8Linear(linear)
    assert quantized.packed_int8_0.dtype == torch.int8
    error = (quantized(x) - linear(x)).abs().max()
    assert 0 < error < 0.02 * linear(x).abs().max()  # int8 path: close, not identical
    assert quantized(x).dtype == torch.float32  # the model's dtype, whatever the kernel's


@pytest.mark.usefixtures("needs_cpu_kernels")
@pytest.mark.parametrize("two_level", [False, True])
def test_int8_kernel_rows_do_not_depend_on_the_batch(two_level):
    """What makes an int8 decode batch-invariant: each row's result is exact, alone or in a batch."""
    torch.manual_seed(0)
    quantized = Int8Linear(nn.Linear(256, 128), two_level=two_level)
    x = torch.randn(32, 256)
    assert torch.equal(torch.cat([quantized(row[None]) for row in x]), quantized(x))


def dequantized(layer: Int8Linear) -> torch.Tensor:
    """The weight the layer multiplies by: one-hot rows round to int16 exactly, so layer(I) is W.T."""
    return layer(torch.eye(layer.in_features)).T


@pytest.mark.usefixtures("needs_cpu_kernels")
def test_second_int8_level_shrinks_the_weight_error_a_hundredfold():
    torch.manual_seed(0)
    linear = nn.Linear(256, 128, bias=False)
    errors = [(dequantized(Int8Linear(linear, two_level=two)) - linear.weight).abs().max().item() for two in (False, True)]
    assert errors[1] < errors[0] / 100


@pytest.mark.usefixtures("needs_cpu_kernels")
def test_quantize_replaces_every_linear_and_gives_qkv_two_levels():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    model.qkv_proj = nn.Linear(8, 8)
    model.lm_head = nn.Linear(8, 16)
    quantize_int8(model)
    assert [type(m).__name__ for m in (model[0], model[2][0], model.qkv_proj)] == ["Int8Linear"] * 3
    assert [m.levels for m in (model[0], model.qkv_proj, model.lm_head)] == [1, 2, 1]


def test_bf16_weights_are_refused_where_they_mean_nothing_or_run_slowly(monkeypatch):
    bf16 = FormatChoice("bf16", "test")
    with pytest.raises(ValueError, match="MINIVLLM_DTYPE=bfloat16"):
        prepare_linears(nn.Sequential(nn.Linear(8, 8)).bfloat16(), bf16, torch.device("cpu"))
    monkeypatch.setattr(formats, "cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ValueError, match="AVX512-BF16"):
        prepare_linears(nn.Sequential(nn.Linear(8, 8)), bf16, torch.device("cpu"))


def test_a_linear_the_kernel_cannot_take_is_refused_at_load():
    with pytest.raises(ValueError, match="multiple of 8"):
        quantize_int8(nn.Sequential(nn.Linear(12, 4)))
