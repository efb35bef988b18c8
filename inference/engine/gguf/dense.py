"""Our model from a GGUF's own tensors with dense weights in the model's dtype, on its device: how a
GGUF runs on CUDA (and on the CPU under MINIVLLM_CPU_KERNELS=0, where the same code is tested).

Each tensor's bytes are copied to the device as they lie in the mapped file and de-quantized there
(gguf/dequantize.py), one tensor at a time; Q/K rows are put back in HF's rotary order and
Q/K/V and gate/up fused as our layers expect (the family's `gguf_layout`, as gguf/weights.py
reads it for the CPU kernels). The module is built on the CPU without initialising its weights,
so its float32 parameters are never written (untouched pages cost nothing) before each is replaced.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.no_init import WithoutWeightInit
from .checkpoint import GGUFCheckpoint
from .dequantize import TYPES, dequantize
from .weights import _set, _uninterleave_rows, file_embeddings, set_rope_factors


def can_build(model_class, hf_config, checkpoint: GGUFCheckpoint) -> bool:
    """A layout for this family and every tensor of a type torch de-quantizes here."""
    if hf_config.model_type not in getattr(model_class, "GGUF_ARCHITECTURES", ()):
        return False
    return all(entry.type in TYPES for entry in checkpoint.tensors.values())


def build(model_class, hf_config, checkpoint: GGUFCheckpoint, max_model_len: int, device, dtype) -> nn.Module:
    with WithoutWeightInit():
        model = model_class(hf_config, max_positions=max_model_len)
    linears, floats = model.gguf_layout()
    written: set[str] = set()

    def put(path: str, value: torch.Tensor) -> None:
        _set(model, path, nn.Parameter(value, requires_grad=False))
        written.add(path)

    embedding = _tensor(checkpoint, "token_embd.weight", None, device, dtype)
    put("embed_tokens.weight", embedding)
    for path, name in file_embeddings(model).items():
        put(path + ".weight", _tensor(checkpoint, name, None, device, dtype))
    for path, parts in linears.items():
        if parts[0][0] not in checkpoint.tensors:  # a bias this file does not have
            continue
        if parts == [("token_embd.weight", None)]:  # tied: the lm_head is the embedding
            model.lm_head.weight = model.embed_tokens.weight
            written.add(path)
            continue
        put(path, torch.cat([_tensor(checkpoint, name, heads, device, dtype) for name, heads in parts]))
    experts = model.gguf_expert_layout() if hasattr(model, "gguf_expert_layout") else {}
    for path, names in experts.items():  # [E, rows, columns] each, parts (gate, up) side by side per expert
        put(path + ".weight", torch.cat([_tensor(checkpoint, name, None, device, dtype) for name in names], dim=1))
    for path, name in floats.items():
        owner = model.get_submodule(path.rpartition(".")[0])
        value = _tensor(checkpoint, name, None, device, torch.float32 if getattr(owner, "keep_float32", False) else dtype)
        # a one-row linear the file keeps 1-D (Qwen3.5-MoE's shared-expert gate) in the module's own shape
        put(path, value.reshape(model.get_parameter(path).shape))
    missing = {name for name, _ in model.named_parameters(remove_duplicate=False)} - written
    if missing:
        raise ValueError(f"the GGUF file sets none of {sorted(missing)}")
    set_rope_factors(model, checkpoint)
    return model.to(device).eval()  # what is left: the rotary tables, float32 as every path keeps them


def _tensor(checkpoint: GGUFCheckpoint, name: str, heads: int | None, device, dtype) -> torch.Tensor:
    """One tensor of the file, de-quantized on `device`, its rows in our order."""
    entry = checkpoint.tensors[name]
    values = dequantize(checkpoint.raw_tensor(name).to(device), entry.type, entry.shape, dtype)
    if heads is not None:
        values = values[_uninterleave_rows(entry.shape[0], heads).to(device)]
    return values
