"""Our model built straight from a GGUF's 4- and 8-bit blocks (gguf_checkpoint.py): every linear a
GroupLinear over the file's own levels, scales and minimums, the tied embedding reading the
lm_head's packed rows, norms copied as float32. No float32 copy of a weight exists at any point.

Used when the chosen format keeps the checkpoint's groups (`auto` on a Q4 / Q8_0 GGUF, or
MINIVLLM_QUANT=int4 / q8_0) and the model family says where its tensors are (`gguf_layout`);
otherwise the loader takes transformers' de-quantized weights instead.
"""

from __future__ import annotations

import torch
from torch import nn

from .gguf_checkpoint import GROUPED_TYPES, GGUFCheckpoint
from .layers.linear.groups import GroupLinear
from .layers.linear.prefetch import prefetch_for
from .models.no_init import WithoutWeightInit


def can_build(model_class, hf_config, checkpoint: GGUFCheckpoint, fmt: str) -> bool:
    """Whether `build` applies: a layout for this family and every matrix in 4- or 8-bit groups, as `fmt` keeps them."""
    if fmt not in ("int4", "q8_0") or hf_config.model_type not in getattr(model_class, "GGUF_ARCHITECTURES", ()):
        return False
    wanted = ("q4_0", "q4_1", "q8_0") if fmt == "int4" else ("q8_0",)
    matrices = [e for e in checkpoint.tensors.values() if len(e.shape) == 2]
    return bool(matrices) and all(e.type in GROUPED_TYPES for e in matrices) and checkpoint.weight_type in wanted


def build(model_class, hf_config, checkpoint: GGUFCheckpoint, max_model_len: int) -> nn.Module:
    with WithoutWeightInit():  # allocated, never written: untouched pages cost no memory, and each is replaced below
        model = model_class(hf_config, max_positions=max_model_len)
    linears, floats = model.gguf_layout()
    tied = model.cfg.tie_word_embeddings
    for path, parts in linears.items():
        _set(model, path, _group_linear(checkpoint, parts))
    for path, name in floats.items():
        _set(model, path, nn.Parameter(checkpoint.float_tensor(name), requires_grad=False))
    table = model.lm_head if tied else _group_linear(checkpoint, [("token_embd.weight", None)])
    model.embed_tokens = table.embedding()
    prefetch_for([m for m in model.modules() if isinstance(m, GroupLinear)])
    return model.eval()


def _group_linear(checkpoint: GGUFCheckpoint, parts: list[tuple[str, int | None]]) -> GroupLinear:
    pieces, bits = [], set()
    for name, heads in parts:
        levels, scales, minimums, piece_bits = checkpoint.groups(name)
        if heads is not None:
            order = _uninterleave_rows(levels.shape[0], heads)
            levels, scales, minimums = levels[order], scales[order], minimums[order]
        pieces.append((levels, scales, minimums))
        bits.add(piece_bits)
    levels, scales, minimums = (torch.cat(column) for column in zip(*pieces))
    # a fused Q/K/V of 4- and 8-bit tensors goes 8-bit: a 4-bit level is an 8-bit level of the same value
    return GroupLinear(levels, scales, minimums, max(bits))


def _uninterleave_rows(rows: int, heads: int) -> torch.Tensor:
    """The row order HF's GGUF reader gives Q or K: llama.cpp stored each head's two rotary halves interleaved."""
    half = rows // heads // 2
    return torch.arange(rows).reshape(heads, half, 2).transpose(1, 2).reshape(rows)


def _set(model: nn.Module, path: str, value) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent_path) if parent_path else model, name, value)
