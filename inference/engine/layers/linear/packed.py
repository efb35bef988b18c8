"""float32 linears on CPU with weights packed once at load for the fastest GEMM this CPU has.

A batched decode multiplies a few to a few dozen rows by a wide weight, where plain F.linear
is slow. Which packed GEMM wins depends on the CPU (docs/performance-log.md, sections 14 and 22):
- Intel: MKL's packed SGEMM (`cblas_sgemm_compute`, what `mkl::_mkl_linear` calls), measured
  1.6-1.9x oneDNN at 8-32 rows on a Xeon. The packed layout does not depend on the row count,
  so the one packing serves every call: we pass each call's own row count as the "prepacked
  batch size", which keeps the op on its packed path. MKL does not promise that layout, so
  it is checked once per process against F.linear (`mkl_packing_serves_any_row_count`); where
  the check fails, oneDNN is used.
- elsewhere (AMD): oneDNN (`mkldnn::_linear_pointwise`), measured 1.7x MKL's F.linear on an
  EPYC at 32 rows; MKL is Intel's library.
Both are the ops torch's own compiler emits for CPU linears.

`onednn_bf16` (MINIVLLM_QUANT=bf16, see __init__.py) packs the weights as bf16 for oneDNN's
bf16 GEMM: each call rounds its float32 rows to bf16 and its outputs come back as float32. The
weight is reordered once into the blocked layout oneDNN's kernel reads: left in plain row-major
order, its AMX kernel re-packed it on every call, half the speed at 1-32 rows on a Xeon with AMX
for the same bits (docs/performance-log.md, section 33).

oneDNN multiplies one row with another kernel than two or more, and on some CPUs (an EPYC with
AVX-512, no AMX) that kernel sums in another order, in float32 and in bf16 alike, so a row alone
and the same row in a batch differ in their last bits (every count from 2 to 300 rows agrees
there). Each oneDNN weight shape is probed once per process (`onednn_single_row_differs`); where
it differs, a lone row goes in twice (here and in the C++ layer): batching never changes a
request's tokens.

The packed weights are plain attributes, not parameters or buffers: load the model onto its
device before packing, and do not move it afterwards.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from ...device import cpu_vendor
from ...env import env_bool
from .base import replace_linears

MKL_PACKING_ROWS = 32  # what the packing call is told; the layout it returns is the same for any
ONEDNN_PACKING_ROWS = 32  # the row count oneDNN is told when it picks its bf16 weight layout (1-33 rows measured)


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """Not under MINIVLLM_CPU_KERNELS=0, which keeps the plain nn.Linear CUDA runs."""
    if device.type != "cpu" or dtype != torch.float32 or not env_bool("MINIVLLM_CPU_KERNELS", True):
        return False
    return packing_backend() is not None


@functools.cache
def packing_backend() -> str | None:
    """ "mkl" on Intel CPUs, "onednn" on others, None where this torch has neither op."""
    has_mkl = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
    has_onednn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    if has_mkl and cpu_vendor() == "GenuineIntel" and mkl_packing_serves_any_row_count():
        return "mkl"
    return "onednn" if has_onednn else None


@functools.cache
def mkl_packing_serves_any_row_count() -> bool:
    """One weight packed for MKL_PACKING_ROWS, multiplied at other row counts, equals F.linear."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(72, 48, generator=generator)
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, MKL_PACKING_ROWS)
    for rows in (1, 3, MKL_PACKING_ROWS + 9):
        x = torch.randn(rows, 48, generator=generator)
        got = torch.ops.mkl._mkl_linear(x, packed, _shape_of(weight), None, rows)
        if not torch.allclose(got, torch.nn.functional.linear(x, weight), rtol=1e-4, atol=1e-4):
            return False
    return True


def _shape_of(weight: torch.Tensor) -> torch.Tensor:
    """What `_mkl_linear` wants beside the packed weight: it reads only the shape and dtype, since we
    always pass the call's own row count (it would fall back to this tensor otherwise). A
    zero-strided view, so the dense weight need not stay in memory beside its packed copy."""
    return weight.new_zeros(()).expand(weight.shape)


def _bf16_onednn_weight(weight: torch.Tensor) -> torch.Tensor:
    """The bf16 weight in oneDNN's blocked layout; plain where torch refuses the reorder (a CPU
    without AVX-512 BW/VL/DQ, where MINIVLLM_QUANT=bf16 is refused anyway and only tests get here)."""
    bf16 = weight.to(torch.bfloat16)
    try:
        return torch.ops.mkldnn._reorder_linear_weight(bf16, ONEDNN_PACKING_ROWS)
    except RuntimeError:
        return bf16.to_mkldnn()


PROBE_ROWS = 256  # rows the probe compares: a differing row is 1 in 2-60 where the kernels differ


def _onednn(rows: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, bf16: bool) -> torch.Tensor:
    if bf16:
        rows = rows.to(torch.bfloat16)
    return torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")


@functools.cache
def onednn_single_row_differs(out_features: int, in_features: int, bf16: bool) -> bool:
    """Whether oneDNN's GEMM on a weight of this shape (float32, or bf16) gives some row, alone,
    other bits than the same row among others; measured once per shape on random data."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator)
    packed = _bf16_onednn_weight(weight) if bf16 else weight.to_mkldnn()
    x = torch.randn(PROBE_ROWS, in_features, generator=generator)
    together = _onednn(x, packed, None, bf16)
    return any(not torch.equal(_onednn(x[i : i + 1], packed, None, bf16), together[i : i + 1]) for i in range(len(x)))


def onednn_linear(rows: torch.Tensor, packed: torch.Tensor, bias, bf16: bool, pair_single_rows: bool) -> torch.Tensor:
    """float32 rows through oneDNN's GEMM (bf16: rounded in), float32 out; a lone row goes in
    twice where its kernel differs."""
    if pair_single_rows and rows.shape[0] == 1:
        return _onednn(rows.expand(2, -1).contiguous(), packed, bias, bf16)[:1].float()
    return _onednn(rows, packed, bias, bf16).float()


class PackedLinear(nn.Module):
    def __init__(self, linear: nn.Linear, backend: str | None = None):
        super().__init__()
        self.backend = backend or packing_backend()
        weight = linear.weight.detach()
        if self.backend == "mkl":
            self.weight = _shape_of(weight)
            self.packed_weight = torch.ops.mkl._mkl_reorder_linear_weight(weight, MKL_PACKING_ROWS)
        elif self.backend == "onednn_bf16":
            self.weight = None
            self.packed_weight = _bf16_onednn_weight(weight)
            self.pair_single_rows = onednn_single_row_differs(*weight.shape, bf16=True)
        else:
            self.weight = None
            self.packed_weight = weight.to_mkldnn()
            self.pair_single_rows = onednn_single_row_differs(*weight.shape, bf16=False)
        self.bias = linear.bias
        self.in_features = linear.in_features
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if self.backend == "mkl":
            out = torch.ops.mkl._mkl_linear(rows, self.packed_weight, self.weight, self.bias, rows.shape[0])
        elif self.backend == "onednn_bf16":  # the same ops, in the same order, as Projection in llama_layer.cpp
            out = onednn_linear(rows, self.packed_weight, None, True, self.pair_single_rows)
            if self.bias is not None:
                out = out + self.bias
        else:
            out = onednn_linear(rows, self.packed_weight, self.bias, False, self.pair_single_rows)
        return out.view(*x.shape[:-1], self.out_features)

    def projection(self, cpp):
        if self.backend == "onednn_bf16":
            return cpp.Projection.onednn_bf16(self.packed_weight, self.bias, self.pair_single_rows)
        if self.backend == "mkl":
            return cpp.Projection.mkl(self.packed_weight, self.weight, self.bias)
        return cpp.Projection.onednn(self.packed_weight, self.bias, self.pair_single_rows)


def pack_linears(model: nn.Module, backend: str | None = None) -> nn.Module:
    """Replaces every nn.Linear with a PackedLinear (a tied lm_head gets its own packed copy)."""
    return replace_linears(model, lambda _name, linear: PackedLinear(linear, backend))
