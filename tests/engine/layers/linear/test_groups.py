"""Groups of 32: Q4_1's and Q8_0's scales, the embedded GGUF's weights given back, and which linears go to groups."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.layers.linear import FormatChoice, GroupLinear, Int8Linear, prepare_linears
from inference.engine.layers.linear.groups import GroupEmbedding, quantize_groups, quantize_groups_8bit
from tests.support.engine_helpers import dequantize_groups


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


def test_8bit_groups_give_back_the_embedded_gguf_embedding_exactly(real_hf_model):
    """The embedded model's tied embedding is Q8_0: re-quantizing its de-quantized rows loses nothing."""
    weight = real_hf_model.get_input_embeddings().weight.detach().float()
    assert torch.equal(dequantize_groups(*quantize_groups_8bit(weight)), weight)


class TiedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.layers = nn.Sequential(nn.Linear(64, 96), nn.Linear(96, 40))
        self.odd = nn.Linear(40, 64)  # 40 inputs: not whole groups of 32
        self.lm_head = nn.Linear(64, 100, bias=False)
        self.lm_head.weight = self.embed.weight


@pytest.mark.usefixtures("needs_cpu_kernels")  # GroupLinear packs for the group kernel
def test_int4_puts_layers_in_4bit_the_lm_head_in_8bit_and_odd_widths_in_int8():
    model = TiedModel()
    table = model.embed.weight.detach().clone()
    prepare_linears(model, FormatChoice("int4", "test"), torch.device("cpu"))
    assert [type(m) for m in (*model.layers, model.odd, model.lm_head)] == [GroupLinear, GroupLinear, Int8Linear, GroupLinear]
    assert [m.bits for m in (*model.layers, model.lm_head)] == [4, 4, 8]
    # the tied embedding now reads the lm_head's packed rows: no float32 table is left
    assert isinstance(model.embed, GroupEmbedding) and not any(p.numel() == table.numel() for p in model.parameters())
    ids = torch.tensor([3, 99])
    expected = dequantize_groups(*quantize_groups_8bit(table))[ids]
    assert torch.equal(model.embed(ids), expected)


@pytest.mark.usefixtures("needs_cpu_kernels")
def test_q8_0_puts_every_whole_group_linear_in_8bit():
    model = TiedModel()
    prepare_linears(model, FormatChoice("q8_0", "test"), torch.device("cpu"))
    assert [m.bits for m in (*model.layers, model.lm_head)] == [8, 8, 8] and isinstance(model.odd, Int8Linear)


@pytest.mark.usefixtures("needs_cpu_kernels")
@pytest.mark.parametrize("bits", [4, 8])
def test_group_linear_adds_the_bias_and_keeps_the_shape(bits):
    torch.manual_seed(1)
    linear = nn.Linear(64, 16)
    x = torch.randn(2, 3, 64)
    out = GroupLinear.from_linear(linear, bits)(x)
    assert out.shape == (2, 3, 16) and out.dtype == torch.float32
    quantize = quantize_groups if bits == 4 else quantize_groups_8bit
    expected = x.reshape(-1, 64) @ dequantize_groups(*quantize(linear.weight)).T + linear.bias
    torch.testing.assert_close(out.reshape(-1, 16), expected, rtol=0.02, atol=0.02)


def test_refuses_weights_beyond_float16():
    with pytest.raises(ValueError, match="float16"):
        quantize_groups(torch.full((1, 32), 1e6) * torch.arange(32.0))
    with pytest.raises(ValueError, match="multiples of 32"):
        quantize_groups(torch.randn(2, 48))
