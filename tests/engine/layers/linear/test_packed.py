"""Packed float32 linears (MKL, oneDNN): the same function as nn.Linear, chosen only where it applies."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.config import EngineConfig
from inference.engine.layers.linear import bf16_weights_run_natively
from inference.engine.layers.linear.packed import PackedLinear, can_pack, pack_linears, packing_backend
from inference.engine.loader import load_model

pytestmark = pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="no packed GEMM in this torch")
BACKENDS = [b for b in ("mkl", "onednn") if b == "onednn" or torch.backends.mkl.is_available()]
# oneDNN has no bf16 inner product on CPUs without AVX512-BF16 (MINIVLLM_QUANT=bf16 refuses them too)
NEEDS_AVX512_BF16 = pytest.mark.skipif(not bf16_weights_run_natively(), reason="MINIVLLM_QUANT=bf16 needs AVX512-BF16")
ONEDNN_BACKENDS = [pytest.param("onednn_bf16", marks=NEEDS_AVX512_BF16), "onednn"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [1, 7, 31, 32, 33, 300])  # MKL's packing is made once, for 32 rows
def test_packed_linear_matches_nn_linear(backend, rows):
    torch.manual_seed(0)
    linear = nn.Linear(96, 320)
    x = torch.randn(2, rows, 96)
    expected = linear(x)
    got = PackedLinear(linear, backend)(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@NEEDS_AVX512_BF16
@pytest.mark.parametrize("rows", [1, 7, 33])
def test_bf16_packing_is_nn_linear_with_bf16_weights_and_rounding(rows):
    """MINIVLLM_QUANT=bf16's linear: float32 in and out, the product of bf16-rounded rows and weights."""
    torch.manual_seed(rows)
    linear = nn.Linear(96, 320)
    x = torch.randn(rows, 96)
    got = PackedLinear(linear, "onednn_bf16")(x)
    assert got.dtype == torch.float32
    rounded = x.bfloat16().double() @ linear.weight.detach().bfloat16().double().T
    expected = rounded.bfloat16().float() + linear.bias.detach()  # the GEMM hands back bf16, then the bias is added
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)
    assert (got - linear(x)).abs().max() > 0  # not float32's product: the mode's rounding is real


@NEEDS_AVX512_BF16
@pytest.mark.parametrize("shape", [(3072, 576), (576, 1536)])  # SmolLM2's gate/up and down
def test_bf16_blocked_layout_gives_the_plain_weights_bits(shape):
    """The reorder at load changes where oneDNN reads the weight from, not what it computes."""
    torch.manual_seed(1)
    linear = nn.Linear(shape[1], shape[0], bias=False)
    plain = linear.weight.detach().bfloat16().to_mkldnn()
    packed = PackedLinear(linear, "onednn_bf16")
    for rows in (1, 2, 8, 33):
        x = torch.randn(rows, shape[1])
        expected = torch.ops.mkldnn._linear_pointwise(x.bfloat16(), plain, None, "none", [], "").float()
        assert torch.equal(packed(x), expected), rows


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="no MKL in this torch")
@pytest.mark.parametrize("shape", [(3072, 576), (576, 1536)])  # SmolLM2's gate/up and down
@pytest.mark.parametrize("rows", [1, 5, 33, 100])
def test_one_mkl_packing_serves_every_row_count_at_model_shapes(shape, rows):
    torch.manual_seed(rows)
    linear = nn.Linear(shape[1], shape[0], bias=False)
    x = torch.randn(rows, shape[1])
    packed = PackedLinear(linear, "mkl")
    assert packed.weight.stride() == (0, 0)  # no dense copy kept beside the packed one
    torch.testing.assert_close(packed(x), linear(x), rtol=1e-4, atol=1e-4)


def test_mkl_is_the_choice_on_intel_only():
    from inference.engine.device import cpu_vendor
    from inference.engine.layers.linear.packed import mkl_packing_serves_any_row_count

    on_intel = cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available()
    assert (packing_backend() == "mkl") == (on_intel and mkl_packing_serves_any_row_count())


def test_pack_replaces_every_linear_and_keeps_biases():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4, bias=False)))
    pack_linears(model)
    assert [type(m).__name__ for m in (model[0], model[2][0])] == ["PackedLinear", "PackedLinear"]
    assert model[0].bias is not None and model[2][0].bias is None


def test_only_float32_on_cpu_is_packed():
    assert not can_pack(torch.device("cpu"), torch.bfloat16)
    assert not can_pack(torch.device("cuda"), torch.float32)


@pytest.mark.parametrize("quantization, expected", [("none", "PackedLinear"), ("int8", "Int8Linear")])
def test_loader_packs_float32_models_but_not_int8_ones(tiny_llama_dir, quantization, expected):
    bundle = load_model(EngineConfig(model=tiny_llama_dir, dtype="float32", device="cpu", quantization=quantization))
    assert type(bundle.model.layers[0].mlp.gate_up_proj).__name__ == expected
    assert type(bundle.model.lm_head).__name__ == expected


@pytest.mark.parametrize("backend", ONEDNN_BACKENDS)
@pytest.mark.parametrize("shape", [(576, 1536), (960, 576)])  # SmolLM2's down and QKV projections
def test_a_onednn_row_alone_gets_the_bits_it_gets_in_a_batch(shape, backend):
    """oneDNN's one-row kernel sums in another order on some CPUs: where the probe finds it does,
    a lone row goes in twice, in Python and in the C++ layer alike."""
    from inference.engine.kernels import kernels

    torch.manual_seed(2)
    packed = PackedLinear(nn.Linear(shape[1], shape[0], bias=backend == "onednn"), backend)
    projection = packed.projection(kernels())
    x = torch.randn(256, shape[1])
    batch = packed(x)
    assert torch.equal(torch.cat([packed(x[i : i + 1]) for i in range(len(x))]), batch)
    assert torch.equal(torch.cat([projection(x[i : i + 1]) for i in range(len(x))]), projection(x))
    assert torch.equal(projection(x), batch)
