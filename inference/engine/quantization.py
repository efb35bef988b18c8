"""Weight-only quantization on CPU: int4 (MINIVLLM_QUANT=int4, its layers in 4-bit groups,
int4_linear.py), the latency mode for one to a few streams; int8 (MINIVLLM_QUANT=int8), the
throughput mode on a CPU with AMX tiles and a latency mode elsewhere; and bf16
(MINIVLLM_QUANT=bf16), the batched throughput mode where the CPU multiplies bf16 natively but
has no AMX (docs/performance.md, sections 26 and 35).

bf16: the linears' weights are stored in bf16 and multiplied by oneDNN's bf16 GEMM (rows rounded
to bf16, float32 sums, outputs rounded to bf16 and handed back as float32); norms, attention, the
residual stream and the KV cache stay float32. On an EPYC with AVX512-BF16 (and no AMX) that GEMM
ran 1.7-2x oneDNN's float32 at 8-32 rows (docs/performance.md, section 26). Without AVX512-BF16,
oneDNN emulates bf16 slowly, so the mode is refused there.

int8:

A decode step on CPU is bound by reading weights from memory; int8 weights halve the bytes
of bf16 and quarter those of float32. Scales are per output channel and symmetric. Our kernel
(kernels/int8_linear.cpp) rounds each float32 activation row to int16 with its own scale and
sums exact integer products (AVX2, AVX-512BW, AVX-512 VNNI or AMX tiles, the same bits on each). The weights are
kept in the kernel's packed order, which makes each block of channels one sequential read.

Every row, prefill or decode, goes through that kernel, because it is exact per row: a row's
result never depends on the rows beside it, so a request's tokens do not change with the
batch around it. Any BLAS GEMM in the path breaks that (MKL gives a row different low bits
in a batch of 8 than alone).
"""
from __future__ import annotations

import torch
from torch import nn

from .config import QUANT_METHODS
from .device import cpu_flags
from .int4_linear import quantize_int4
from .int8_prefetch import tune_int8_prefetch
from .kernels import kernels
from .linear_swap import RowKernelLinear, replace_linears
from .packed_linear import pack_linears

# Q/K feed softmax through RoPE, where small weight errors flip near-tie tokens most: measured
# on SmolLM2 over 320 teacher-forced positions, plain int8 Q/K/V drops agreement with bf16 from
# ~96.6% to ~94.7%. They get a second int8 level holding what the first one rounded away: the
# weights' error drops ~100x. Still through the kernel: float32 Q/K/V would cost four times the
# bytes and break batch invariance (see above).
TWO_LEVEL = ("qkv_proj", "c_attn")


def _quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 with float32 scales."""
    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    quantized = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return quantized, scales


class Int8Linear(RowKernelLinear):
    def __init__(self, linear: nn.Linear, two_level: bool = False):
        """`two_level`: add a second int8 weight holding the first one's rounding error."""
        super().__init__()
        weight = linear.weight.detach().float()
        levels = []
        for _ in range(2 if two_level else 1):
            quantized, scales = _quantize_rows(weight)
            levels.append((quantized, scales))
            weight = weight - quantized.float() * scales[:, None]
        self.levels = len(levels)
        for i, (quantized, scales) in enumerate(levels):
            self.register_buffer(f"packed_int8_{i}", kernels().int8_pack_weight(quantized))
            self.register_buffer(f"scales_{i}", scales)
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def weight_levels(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The int8 weights (in the kernel's packed order) and their scales, level by level."""
        buffers = self._buffers  # direct: this runs ~120 times a decode step on the module path
        return [buffers[f"packed_int8_{i}"] for i in range(self.levels)], [buffers[f"scales_{i}"] for i in range(self.levels)]

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        """rows (contiguous float32 [M, K]) @ W.T, no bias."""
        return kernels().int8_linear(rows, *self.weight_levels())


def quantize_int8(model: nn.Module, two_level: tuple[str, ...] = TWO_LEVEL) -> nn.Module:
    """Replaces every nn.Linear (lm_head included, untied from the embedding) with Int8Linear,
    those named in `two_level` with two int8 levels."""
    def build(name: str, linear: nn.Linear) -> Int8Linear:
        if linear.in_features % 8:
            raise ValueError(f"MINIVLLM_QUANT=int8: {name} has {linear.in_features} inputs; the kernel needs a multiple of 8")
        return Int8Linear(linear, two_level=name in two_level)

    return replace_linears(model, build)


def bf16_weights_run_natively() -> bool:
    """MINIVLLM_QUANT=bf16 needs oneDNN and a CPU whose bf16 dot products are instructions."""
    return "avx512_bf16" in cpu_flags() and torch.backends.mkldnn.is_available()


def apply_quantization(model: nn.Module, method: str, device: torch.device) -> nn.Module:
    if method == "none":
        return model
    if method in ("int8", "int4"):
        if device.type != "cpu":
            raise ValueError(f"MINIVLLM_QUANT={method} uses a CPU kernel; on CUDA run bf16 (MINIVLLM_QUANT=none)")
        if kernels() is None:
            raise ValueError(f"MINIVLLM_QUANT={method} needs the engine's AVX2 kernels, which did not build here (see the log)")
        if method == "int4":
            quantize_int4(model)  # what it leaves (the lm_head) becomes int8 below
        quantize_int8(model)
        tune_int8_prefetch([module for module in model.modules() if isinstance(module, RowKernelLinear)])
        return model
    if method == "bf16":
        dtype = next(model.parameters()).dtype
        if device.type != "cpu" or dtype != torch.float32:
            raise ValueError("MINIVLLM_QUANT=bf16 gives a float32 CPU model bf16 linears; on CUDA, or for a bf16 model, set MINIVLLM_DTYPE=bfloat16 instead")
        if not bf16_weights_run_natively():
            raise ValueError("MINIVLLM_QUANT=bf16 needs a CPU with AVX512-BF16 and torch's oneDNN; use MINIVLLM_QUANT=none here")
        return pack_linears(model, backend="onednn_bf16")
    raise ValueError(f"quantization {method!r} is not supported (supported: {', '.join(QUANT_METHODS)})")
