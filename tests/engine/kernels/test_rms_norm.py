"""The RMSNorm kernel against HF's LlamaRMSNorm formula."""

from __future__ import annotations

import torch


def hf_rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def test_matches_hf_formula_row_by_row(cpp):
    torch.manual_seed(0)
    x = torch.randn(37, 4, 576) * 3
    weight = torch.randn(576)
    out = cpp.rms_norm(x, weight, 1e-5)
    assert out.shape == x.shape
    torch.testing.assert_close(out, hf_rms_norm(x, weight, 1e-5), rtol=2e-6, atol=2e-6)
    assert torch.equal(cpp.rms_norm(x[5:6].contiguous(), weight, 1e-5), out[5:6])  # rows are independent


def test_eps_keeps_a_zero_row_finite(cpp):
    out = cpp.rms_norm(torch.zeros(2, 16), torch.ones(16), 1e-6)
    assert torch.equal(out, torch.zeros(2, 16))
