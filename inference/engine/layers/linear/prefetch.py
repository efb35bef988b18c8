"""How far ahead the int8 and 4-bit kernels prefetch weights: timed on this machine when the model loads.

Why timed, not fixed: asking for the weight lines 4 KB ahead made a pass over SmolLM2's int8
weights ~30% faster on a 2-core Skylake Xeon whose cores each read ~8 GB/s, and ~35% slower on a
Zen 4 EPYC whose hardware prefetcher already kept up (docs/performance-log.md sections 25 and 28).
No CPU flag tells the two apart. A pass takes 5-20 ms, so timing each candidate a few times,
in alternation because these hosts are shared and noisy, costs well under a second at load.
The choice changes speed only: every distance gives the same bits.

`prefetch_for` keeps each result in ~/.cache/minivllm/prefetch.json, keyed by the CPU model, the
kernels' instruction set and the weights' shapes, so a restart on the same machine skips the
timing (a restart must be ready in seconds; the timing's ~0.5 s is a tenth of that).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time

import torch

from ...device import cpu_model_name
from ...env import cache_home
from ...kernels import kernels

log = logging.getLogger(__name__)

CANDIDATE_BYTES = (0, 1024, 2048, 4096, 8192)  # 0: the hardware prefetcher alone
ROUNDS = 5
CACHE_FILE = cache_home() / "prefetch.json"


def prefetch_for(layers: list) -> int:
    """The distance for these layers on this machine: cached from an earlier timing, else timed now and cached."""
    if not layers:
        return kernels().weight_prefetch_bytes()
    shapes = sorted({(layer.out_features, layer.in_features, type(layer).__name__) for layer in layers})
    key = f"{cpu_model_name()}|{kernels().linear_isa()}|{shapes}"
    cached = _read_cache().get(key)
    if cached in CANDIDATE_BYTES:
        kernels().set_weight_prefetch_bytes(cached)
        log.info("int8/group weight prefetch: %d bytes ahead (timed on this CPU before; %s)", cached, CACHE_FILE)
        return cached
    medians = tune_weight_prefetch(layers)
    fastest = min(medians, key=medians.get)
    _write_cache(key, fastest)
    return fastest


def _read_cache() -> dict:
    try:
        return json.loads(CACHE_FILE.read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(key: str, value: int) -> None:
    """Best effort: without a writable home the next start times again."""
    try:
        CACHE_FILE.parent.mkdir(parents=True, exist_ok=True)
        partial = CACHE_FILE.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({**_read_cache(), key: value}))
        partial.replace(CACHE_FILE)
    except OSError as error:
        log.warning("could not cache the prefetch distance in %s: %s", CACHE_FILE, error)


def tune_weight_prefetch(layers: list, candidates=CANDIDATE_BYTES, rounds: int = ROUNDS) -> dict[int, float]:
    """Times one-row passes over `layers` (Int8Linear and GroupLinear modules) at each candidate
    distance, sets the kernels to the fastest and returns each candidate's median pass in seconds."""
    cpp = kernels()
    rows = {layer.in_features: torch.randn(1, layer.in_features) for layer in layers}

    def one_pass() -> float:
        start = time.perf_counter()
        for layer in layers:
            layer.matmul(rows[layer.in_features])
        return time.perf_counter() - start

    one_pass()  # first touch: page faults and cold caches count against no candidate
    passes: dict[int, list[float]] = {bytes_ahead: [] for bytes_ahead in candidates}
    for _ in range(rounds):
        for bytes_ahead in candidates:
            cpp.set_weight_prefetch_bytes(bytes_ahead)
            passes[bytes_ahead].append(one_pass())
    medians = {bytes_ahead: statistics.median(times) for bytes_ahead, times in passes.items()}
    fastest = min(medians, key=medians.get)
    cpp.set_weight_prefetch_bytes(fastest)
    log.info(
        "int8/group weight prefetch: %d bytes ahead (median pass ms: %s)",
        fastest,
        ", ".join(f"{bytes_ahead}: {seconds * 1e3:.2f}" for bytes_ahead, seconds in medians.items()),
    )
    return medians
