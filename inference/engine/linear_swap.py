"""Swapping a loaded model's nn.Linear layers for a faster kind (int8, packed float32)."""
from __future__ import annotations

from collections.abc import Callable

from torch import nn


def replace_linears(model: nn.Module, build: Callable[[str, nn.Linear], nn.Module]) -> nn.Module:
    """Replaces every nn.Linear, wherever it sits, with `build(its attribute name, it)` (which may
    return it unchanged, to leave it for another kind)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, build(name, child))
    return model
