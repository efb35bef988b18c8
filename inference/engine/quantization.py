"""Weight-only int8 quantization (MINIVLLM_QUANT=int8).

A decode step on CPU is bound by reading weights from memory; int8 weights halve the bytes
of bf16. Scales are per output channel and symmetric, and activations stay in the model
dtype, so `aten._weight_int8pack_mm` de-quantizes on the fly inside the matmul.

That kernel's cost grows with every input row (measured single-threaded, [3072 x 576]:
1 row 102 us vs bf16 167 us; 4 rows 207 vs 187; 32 rows 1766 vs 696), so it only wins for
one or two rows: single-stream decode. Each layer keeps its dense weight too and uses it for
bigger batches and prefill, trading 1.5x weight memory for the best of both.
"""
from __future__ import annotations

import torch
from torch import nn

QUANT_METHODS = ("none", "int8")

# Q/K feed softmax through RoPE, where small weight errors flip near-tie tokens most: measured
# on SmolLM2 over 320 teacher-forced positions, keeping them in the model dtype lifts agreement
# with bf16 from ~94.7% to ~96.6% for ~12% of the weight bytes.
KEEP_FULL_PRECISION = ("qkv_proj", "c_attn")
INT8_MAX_ROWS = 2  # above this many rows the dense matmul is faster


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.dense = linear
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        dtype = linear.weight.dtype
        self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(dtype))
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > INT8_MAX_ROWS:
            return self.dense(x)
        out = torch.ops.aten._weight_int8pack_mm(rows, self.weight_int8, self.scales)
        if self.dense.bias is not None:
            out = out + self.dense.bias
        return out.view(*x.shape[:-1], self.out_features)


def quantize_int8(model: nn.Module, keep: tuple[str, ...] = KEEP_FULL_PRECISION) -> nn.Module:
    """Replaces each nn.Linear not named in `keep` (lm_head included, untied from the embedding) with Int8Linear."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and name not in keep:
                setattr(parent, name, Int8Linear(child))
    return model


def apply_quantization(model: nn.Module, method: str, device: torch.device) -> nn.Module:
    if method == "none":
        return model
    if method == "int8":
        if device.type != "cpu":
            raise ValueError("MINIVLLM_QUANT=int8 uses a CPU kernel; on CUDA run bf16 (MINIVLLM_QUANT=none)")
        return quantize_int8(model)
    raise ValueError(f"quantization {method!r} is not supported (supported: {', '.join(QUANT_METHODS)})")
