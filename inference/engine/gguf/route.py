"""Which route a GGUF's weights take at load (loader.py): under `auto`, the file's own tensors in
place wherever our kernels read them; transformers' reader only for what ours cannot read, and never
for a tensor type transformers' reader refuses."""

from __future__ import annotations

import torch

from ..config import EngineConfig
from ..kernels import kernels
from ..layers.linear import FormatChoice, choose_format
from ..transformers_lock import TRANSFORMERS_LOCK
from .checkpoint import GGUFCheckpoint


def gguf_format(config: EngineConfig, gguf: GGUFCheckpoint, device: torch.device) -> FormatChoice:
    """choose_format for a GGUF, which under `auto` keeps the file's own tensors wherever our kernels
    read them: a Q4_0 / Q8_0 file whose output layer llama.cpp wrote in Q6_K, and F32 / F16 / BF16
    files (which choose_format, seeing only a dtype, would give oneDNN's bf16 or float32 through
    transformers' reader), run as `gguf`: read in place, as float32 matrices."""
    choice = choose_format(config.quantization, checkpoint=gguf.weight_type, device=device)
    if config.quantization != "auto" or device.type != "cpu" or kernels() is None:
        return choice
    if choice.format in ("int4", "q8_0") and not gguf.only_grouped_types:
        return FormatChoice("gguf", f"the checkpoint's own blocks, {gguf.weight_type.upper()} beside other types")
    if gguf.weight_type == "float32":
        return FormatChoice("gguf", "the checkpoint's own float32 matrices, read in place")
    if gguf.weight_type in ("float16", "bfloat16"):
        return FormatChoice("gguf", f"the checkpoint's own {gguf.weight_type} matrices, widened to float32 as they load")
    return choice


def transformers_reads_types(gguf: GGUFCheckpoint) -> bool:
    """Whether transformers' GGUF reader takes every tensor type in the file. It has no Q5_0 or Q5_1,
    which llama-quantize's Q4_K_M writes where a row is no whole number of 256-weight blocks (a small
    model's, or Qwen3.5's DeltaNet projections): such a file is read by ours (gguf/dense.py)."""
    try:
        with TRANSFORMERS_LOCK:
            from transformers.integrations.gguf.dequant import GGML_NAME
    except ImportError:  # a transformers laid out otherwise: let its reader say what it refuses
        return True
    readable = {name.lower() for name in GGML_NAME.values()} | {"f32", "f16", "bf16"}
    return all(entry.type in readable for entry in gguf.tensors.values())
