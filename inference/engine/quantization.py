"""Weight-only int8 quantization (MINIVLLM_QUANT=int8): the single-stream latency mode.

A decode step on CPU is bound by reading weights from memory; int8 weights halve the bytes
of bf16 and quarter those of float32. Scales are per output channel and symmetric, and
`aten._weight_int8pack_mm` de-quantizes on the fly inside the matmul.

That kernel costs about the same for every input row, so it suits decode (one row per
sequence) and loses badly on a prefill of hundreds of rows. Each layer therefore runs decode
rows through the kernel and prefill rows through a dense matmul over the *de-quantized*
weights, rounding like the kernel does (bf16 in, bf16 out). The split follows what each row
is, never how many rows a step has: the kernel is exact per row, so a request's decode does
not change with the batch around it.

The kernel always gets bf16 activations: with float32 ones it is 6x slower on an AVX2 CPU
(measured: [3072 x 576], 1 row, 1196 us vs 199 us).
"""
from __future__ import annotations

import torch
from torch import nn

QUANT_METHODS = ("none", "int8")

# Q/K feed softmax through RoPE, where small weight errors flip near-tie tokens most: measured
# on SmolLM2 over 320 teacher-forced positions, keeping them in the model dtype lifts agreement
# with bf16 from ~94.7% to ~96.6% for ~12% of the weight bytes.
KEEP_FULL_PRECISION = ("qkv_proj", "c_attn")
KERNEL_DTYPE = torch.bfloat16


class DecodeRows:
    """How many leading rows of this step's tokens are decodes; the model runner sets it.

    A step lays out decodes first, then prefill chunks (see attention.py), so one number
    tells every Int8Linear where to split.
    """

    def __init__(self):
        self.count = 0


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear, decode_rows: DecodeRows | None):
        """`decode_rows` None: every row is a decode row (lm_head, which only sees sampled rows)."""
        super().__init__()
        dtype = linear.weight.dtype
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        quantized = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight_int8", quantized)
        self.register_buffer("scales", scales.to(KERNEL_DTYPE))
        # The kernel multiplies by bf16 scales: de-quantize with the same rounded scales.
        self.register_buffer("dense_weight", (quantized.float() * self.scales.float()[:, None]).to(dtype))
        self.bias = linear.bias
        self.out_features = linear.out_features
        self.decode_rows = decode_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        n = rows.shape[0] if self.decode_rows is None else min(self.decode_rows.count, rows.shape[0])
        if n == rows.shape[0]:
            out = self._kernel(rows)
        elif n == 0:
            out = self._dense(rows)
        else:
            out = torch.cat([self._kernel(rows[:n]), self._dense(rows[n:])])
        out = out.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def _kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(rows.to(KERNEL_DTYPE), self.weight_int8, self.scales)

    def _dense(self, rows: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(rows.to(KERNEL_DTYPE).to(rows.dtype), self.dense_weight)
        return out.to(KERNEL_DTYPE)


def quantize_int8(model: nn.Module, keep: tuple[str, ...] = KEEP_FULL_PRECISION) -> nn.Module:
    """Replaces each nn.Linear not named in `keep` (lm_head included, untied from the embedding)
    with Int8Linear, sharing one `model.decode_rows` for the runner to set each step."""
    model.decode_rows = DecodeRows()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and name not in keep:
                shared = None if child is getattr(model, "lm_head", None) else model.decode_rows
                setattr(parent, name, Int8Linear(child, shared))
    return model


def apply_quantization(model: nn.Module, method: str, device: torch.device) -> nn.Module:
    if method == "none":
        return model
    if method == "int8":
        if device.type != "cpu":
            raise ValueError("MINIVLLM_QUANT=int8 uses a CPU kernel; on CUDA run bf16 (MINIVLLM_QUANT=none)")
        return quantize_int8(model)
    raise ValueError(f"quantization {method!r} is not supported (supported: {', '.join(QUANT_METHODS)})")
