"""The float-weight kernel over a GGUF's F16 / BF16 / F32 matrices (kernels/floats/): the file's
values widened exactly, sums within float32 rounding of float64, the same bits on every ISA and in
every batch, rows packed in the order asked."""

from __future__ import annotations

import pytest
import torch

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def raw(weight: torch.Tensor) -> torch.Tensor:
    return weight.contiguous().view(torch.uint8).reshape(-1)


@pytest.mark.parametrize("kind", list(DTYPES))
@pytest.mark.parametrize("rows", [1, 2, 8, 11])  # passes of up to 8 rows (AVX2: 2), then what is left
def test_products_match_float64_on_every_isa(cpp, kind, rows, vector_isas):
    torch.manual_seed(rows)
    weight = torch.randn(21, 97).to(DTYPES[kind])  # 21: a last block of 5 channels; 97: an odd column count
    x = torch.randn(rows, 97)
    packed = cpp.float_pack([raw(weight)], 97, kind)
    exact = x.double() @ weight.double().T
    first = None
    for isa in vector_isas:
        out = cpp.float_linear(x, packed, 21, kind, isa)
        assert torch.allclose(out.double(), exact, rtol=1e-5, atol=1e-5), isa
        first = out if first is None else first
        assert torch.equal(out, first), isa


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_each_row_is_bit_identical_alone_and_in_any_batch(cpp, kind, vector_isas):
    torch.manual_seed(0)
    weight, x = torch.randn(37, 256).to(DTYPES[kind]), torch.randn(19, 256)
    packed = cpp.float_pack([raw(weight)], 256, kind)
    for isa in vector_isas:
        whole = cpp.float_linear(x, packed, 37, kind, isa)
        for rows in (1, 3, 9):
            assert torch.equal(cpp.float_linear(x[:rows].contiguous(), packed, 37, kind, isa), whole[:rows]), (isa, rows)


def test_parts_pack_in_the_given_order(cpp):
    torch.manual_seed(1)
    first, second = torch.randn(5, 64).half(), torch.randn(3, 64).half()
    order = torch.tensor([7, 0, 2, 1, 3, 4, 6, 5])
    x = torch.randn(2, 64)
    fused = cpp.float_linear(x, cpp.float_pack([raw(first), raw(second)], 64, "f16", order), 8, "f16")
    by_hand = torch.cat([first, second])[order]
    assert torch.equal(fused, cpp.float_linear(x, cpp.float_pack([raw(by_hand)], 64, "f16"), 8, "f16"))


def test_rejects_what_it_cannot_compute(cpp):
    weight = raw(torch.randn(4, 64).half())
    with pytest.raises(RuntimeError, match="f16, bf16 or f32"):
        cpp.float_pack([weight], 64, "q4_k")
    with pytest.raises(RuntimeError, match="whole"):
        cpp.float_pack([weight[:10]], 64, "f16")
    packed = cpp.float_pack([weight], 64, "f16")
    with pytest.raises(RuntimeError, match="packed"):
        cpp.float_linear(torch.randn(1, 64), packed, 17, "f16")
