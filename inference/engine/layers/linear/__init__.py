"""Every linear layer of a loaded model, prepared once for the checkpoint and the machine.

`choose_format` is the one place deciding how weights are stored and multiplied
(MINIVLLM_QUANT, `auto` by default); `prepare_linears` swaps the model's nn.Linear layers for
that format. The formats:

- `int4`: 4-bit groups of 32 (llama.cpp's Q4_1 / Q4_0), the lm_head in 8-bit groups (Q8_0),
  through our int8-activation kernel (groups.py). A Q4 GGUF's own format, so `auto` keeps it.
- `q8_0`: 8-bit groups of 32 (llama.cpp's Q8_0), the same kernel. `auto` for a Q8_0 GGUF.
- `gguf`: every tensor of a GGUF in its own type, read in place (gguf/weights.py): the k-quants,
  Q5_0 / Q5_1 and IQ4 through the block kernel (blocks.py), Q4_0 / Q4_1 / Q8_0 as groups. `auto`
  for any other quantized GGUF (Q4_K_M, Q5_K_M, Q6_K, ... and their mixes).
- `int8`: int8 per output channel with int16 activations (int8.py): on a CPU with AMX tiles.
- `bf16`: bf16 weights through oneDNN's GEMM (packed.py), where the CPU multiplies bf16 natively.
  `auto` for a bf16 or float16 checkpoint on such a CPU.
- `none`: the model's dtype; float32 on CPU with weights packed for MKL or oneDNN (packed.py).
  `auto` elsewhere, and on CUDA (bf16 torch paths).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...config import QUANT_METHODS
from ...device import cpu_flags
from ...kernels import kernels
from .base import RowKernelLinear, replace_linears
from .blocks import BLOCK_SHAPES
from .groups import GROUP, GroupLinear
from .int8 import Int8Linear, quantize_int8
from .packed import PackedLinear, can_pack, pack_linears, packing_backend
from .prefetch import prefetch_for

GROUP_BITS = {"int4": 4, "q8_0": 8}
GGUF_BLOCK_TYPES = tuple(BLOCK_SHAPES)  # the block kernel's (kernels/blocks/)

__all__ = [
    "FormatChoice",
    "GroupLinear",
    "Int8Linear",
    "PackedLinear",
    "RowKernelLinear",
    "bf16_weights_run_natively",
    "choose_format",
    "prepare_linears",
]


@dataclass(frozen=True)
class FormatChoice:
    format: str  # one of QUANT_METHODS but auto
    reason: str


def bf16_weights_run_natively() -> bool:
    """MINIVLLM_QUANT=bf16 needs oneDNN and a CPU whose bf16 dot products are instructions."""
    return "avx512_bf16" in cpu_flags() and torch.backends.mkldnn.is_available()


def choose_format(requested: str, *, checkpoint: str, device: torch.device) -> FormatChoice:
    """`checkpoint`: how the weights are stored (a GGUF's type, "q4_1", "q8_0", ..., or a torch
    dtype's name, "bfloat16", "float32", ...). An explicit format always wins."""
    if requested != "auto":
        return FormatChoice(requested, f"MINIVLLM_QUANT={requested}")
    if device.type != "cpu":
        return FormatChoice("none", f"{device.type} runs the torch paths in the model's dtype")
    if kernels() is None:
        return FormatChoice("none", "the CPU kernels did not build here (see the log), so float32 with packed weights")
    if checkpoint in ("q4_0", "q4_1"):
        return FormatChoice(
            "int4", f"the checkpoint's own {checkpoint.upper()} 4-bit groups, int8 activation groups ({kernels().vector_isa()})"
        )
    if checkpoint == "q8_0":
        return FormatChoice("q8_0", f"the checkpoint's own Q8_0 groups, int8 activation groups ({kernels().vector_isa()})")
    if checkpoint in GGUF_BLOCK_TYPES:
        return FormatChoice(
            "gguf", f"the checkpoint's own blocks, each tensor in its type, int8 activation blocks ({kernels().vector_isa()})"
        )
    if checkpoint in ("bfloat16", "float16") and bf16_weights_run_natively():
        return FormatChoice("bf16", f"{checkpoint} weights, and this CPU multiplies bf16 natively")
    return FormatChoice("none", f"{checkpoint} weights: float32 with weights packed for {packing_backend() or 'torch'}")


def prepare_linears(model: nn.Module, choice: FormatChoice, device: torch.device) -> nn.Module:
    """Swaps every nn.Linear for the chosen format; a tied embedding follows a grouped lm_head."""
    fmt = choice.format
    if fmt == "none":
        return pack_linears(model) if can_pack(device, _dtype_of(model)) else model
    if fmt == "bf16":
        if device.type != "cpu" or _dtype_of(model) != torch.float32:
            raise ValueError(
                "MINIVLLM_QUANT=bf16 gives a float32 CPU model bf16 linears; on CUDA, or for a bf16 model, set MINIVLLM_DTYPE=bfloat16 instead"
            )
        if not bf16_weights_run_natively():
            raise ValueError("MINIVLLM_QUANT=bf16 needs a CPU with AVX512-BF16 and torch's oneDNN; use MINIVLLM_QUANT=none here")
        return pack_linears(model, backend="onednn_bf16")
    if fmt == "gguf":
        raise ValueError(
            "MINIVLLM_QUANT=gguf keeps a GGUF file's own blocks; this checkpoint is no GGUF our loader reads in place"
        )
    if fmt not in QUANT_METHODS:
        raise ValueError(f"quantization {fmt!r} is not supported (supported: {', '.join(QUANT_METHODS)})")
    if device.type != "cpu":
        raise ValueError(f"MINIVLLM_QUANT={fmt} uses a CPU kernel; on CUDA run bf16 (MINIVLLM_QUANT=none)")
    if kernels() is None:
        raise ValueError(f"MINIVLLM_QUANT={fmt} needs the engine's AVX2 kernels, which did not build here (see the log)")
    lm_head = getattr(model, "lm_head", None)
    tied = _embeddings_sharing(model, lm_head.weight) if isinstance(lm_head, nn.Linear) else []
    if fmt in GROUP_BITS:
        bits = GROUP_BITS[fmt]

        def build(name: str, linear: nn.Linear) -> nn.Module:
            if linear.in_features % GROUP:
                return linear  # int8 below
            return GroupLinear.from_linear(linear, 8 if name == "lm_head" else bits)

        replace_linears(model, build)
    quantize_int8(model)  # what is left: every layer (int8), or those groups cannot take
    if isinstance(getattr(model, "lm_head", None), GroupLinear):
        for parent, name in tied:
            setattr(parent, name, model.lm_head.embedding())
    prefetch_for([module for module in model.modules() if isinstance(module, RowKernelLinear)])
    return model


def _dtype_of(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _embeddings_sharing(model: nn.Module, weight: torch.Tensor) -> list[tuple[nn.Module, str]]:
    return [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Embedding) and child.weight is weight
    ]
