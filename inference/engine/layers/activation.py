"""Which gate activation a feed-forward uses, as the C++ paths need to know it (the fused layer step,
models/cpu_step.py, and the experts' one-call feed-forward, layers/experts.py): read from the
function itself, so a family that changes its activation can never be computed with another."""

from __future__ import annotations

import functools

import torch.nn.functional as F


def gelu_tanh(activation) -> bool | None:
    """True for GELU-tanh (Gemma's), False for SiLU (the Llama family's), None for any other."""
    if activation is F.silu:
        return False
    if isinstance(activation, functools.partial) and activation.func is F.gelu and activation.keywords == {"approximate": "tanh"}:
        return True
    return None
