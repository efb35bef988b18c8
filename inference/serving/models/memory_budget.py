"""The memory the loaded models share: each one's part of the KV budget, and whether one more fits.

Alone, an engine plans its KV pool from the memory available at its start (a quarter, at most
1 GB: engine/kv_cache/memory_plan.py). A folder's models would each plan that for themselves, so
MINIVLLM_MODELS_MAX models held up to four pools of 1 GB where one request at a time reaches each.
Instead the budget is split: each of up to MODELS_MAX loaded models gets its share of the plan
(`kv_share`), never less than one full context of its own. And before a load the registry asks
whether the model (its weights, as big as its files, and its share of KV) fits in the memory
available now; where it does not, idle models are unloaded first, least recently used first, as
Ollama does, rather than letting the machine swap.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import psutil

from ...engine.kv_cache.memory_plan import KV_CAP_MB, KV_MEMORY_FRACTION, MB

if TYPE_CHECKING:
    from .catalogue import ModelSpec

WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin")
HEADROOM_BYTES = 256 * MB  # the runtime's own growth while a model loads (buffers, a step's activations)


def shared(specs: list[ModelSpec], max_loaded: int) -> list[ModelSpec]:
    """The specs with each model's part of the KV budget: the whole plan for a catalogue of one,
    else 1 / (how many can be loaded at once). A CUDA engine's share of the GPU is split alike."""
    together = min(len(specs), max(1, max_loaded))
    if together <= 1:
        return specs
    share = 1.0 / together
    return [
        dataclasses.replace(
            spec,
            config=dataclasses.replace(
                spec.config,
                kv_share=spec.config.kv_share * share,
                gpu_memory_utilization=spec.config.gpu_memory_utilization * share,
            ),
        )
        for spec in specs
    ]


def weight_bytes(path: str | None) -> int:
    """The model's weights as its files on disk measure them (a GGUF, its split parts, a folder's
    safetensors); 0 for the embedded model or what cannot be read."""
    if not path:
        return 0
    path = os.path.expanduser(path)
    try:
        if os.path.isdir(path):
            return sum(entry.stat().st_size for entry in os.scandir(path) if entry.name.endswith(WEIGHT_SUFFIXES))
        folder, name = os.path.split(path)
        stem = name.split("-00001-of-")[0] if "-00001-of-" in name else None
        if stem is not None:  # a split GGUF: every part
            return sum(entry.stat().st_size for entry in os.scandir(folder or ".") if entry.name.startswith(stem + "-0"))
        return os.path.getsize(path)
    except OSError:
        return 0


def needed_bytes(spec: ModelSpec) -> int:
    """What loading the model will take: its weights, its planned KV share and some headroom. The KV
    part is what its share of the plan allows (the full-context floor is unknown before the load)."""
    config = spec.config
    if config.kv_cache_mb is not None:
        kv = config.kv_cache_mb * MB
    else:
        kv = int(min(psutil.virtual_memory().available * KV_MEMORY_FRACTION, KV_CAP_MB * MB) * config.kv_share)
    return weight_bytes(config.model) + kv + HEADROOM_BYTES


def fits(spec: ModelSpec) -> bool:
    """Whether the model fits in the memory available now."""
    return needed_bytes(spec) <= psutil.virtual_memory().available
