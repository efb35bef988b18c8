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

WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin")  # in order of preference
HEADROOM_BYTES = 256 * MB  # the runtime's own growth while a model loads (buffers, a step's activations)


def shared(specs: list[ModelSpec], together: int) -> list[ModelSpec]:
    """The specs with each model's part of the CPU KV budget: the whole plan for a catalogue of one,
    else 1 / (how many are loaded at once: MINIVLLM_MODELS_MAX in a web process, every one in a
    `runengine` worker). An explicit MINIVLLM_KV_CACHE_MB is each model's own, not shared. A CUDA
    engine keeps its MINIVLLM_GPU_MEMORY_UTILIZATION whole: its weights and peak step must fit in
    it, so splitting it would refuse a model that fits alone (several models on one GPU: set it)."""
    together = min(len(specs), max(1, together))
    if together <= 1:
        return specs
    share = 1.0 / together
    return [
        dataclasses.replace(spec, config=dataclasses.replace(spec.config, kv_share=spec.config.kv_share * share))
        for spec in specs
    ]


def weight_bytes(path: str | None) -> int:
    """The model's weights as its files on disk measure them (a GGUF, its split parts, a folder's
    safetensors, else its .bin files); 0 for the embedded model or what cannot be read."""
    from .catalogue import SPLIT_PART

    if not path:
        return 0
    path = os.path.expanduser(path)
    try:
        if os.path.isdir(path):
            names = {entry.name: entry.stat().st_size for entry in os.scandir(path)}
            for suffix in WEIGHT_SUFFIXES:  # one format: a folder may hold safetensors and .bin copies
                sizes = [size for name, size in names.items() if name.endswith(suffix) and name != "training_args.bin"]
                if sizes:
                    return sum(sizes)
            return 0
        folder, name = os.path.split(path)
        split = SPLIT_PART.match(name)
        if split is not None:  # a split GGUF: every part of it
            return sum(
                entry.stat().st_size
                for entry in os.scandir(folder or ".")
                if (part := SPLIT_PART.match(entry.name)) is not None and part["name"] == split["name"]
            )
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


def fits(spec: ModelSpec, spare_bytes: int = 0) -> bool:
    """Whether the model fits in the memory available now and `spare_bytes` more (what models just
    unloaded give back within a second or so, less what loads under way will take)."""
    return needed_bytes(spec) <= psutil.virtual_memory().available + spare_bytes
