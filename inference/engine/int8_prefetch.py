"""How far ahead the int8 and 4-bit kernels prefetch weights: timed on this machine when the model loads.

Why timed, not fixed: asking for the weight lines 4 KB ahead made a pass over SmolLM2's int8
weights ~30% faster on a 2-core Skylake Xeon whose cores each read ~8 GB/s, and ~35% slower on a
Zen 4 EPYC whose hardware prefetcher already kept up (docs/performance.md sections 25 and 28).
No CPU flag tells the two apart. A pass takes 5-20 ms, so timing each candidate a few times,
in alternation because these hosts are shared and noisy, costs well under a second at load.
The choice changes speed only: every distance gives the same bits.
"""
from __future__ import annotations

import logging
import statistics
import time

import torch

from .kernels import kernels

log = logging.getLogger(__name__)

CANDIDATE_BYTES = (0, 1024, 2048, 4096, 8192)  # 0: the hardware prefetcher alone
ROUNDS = 5


def tune_int8_prefetch(layers: list, candidates=CANDIDATE_BYTES, rounds: int = ROUNDS) -> dict[int, float]:
    """Times one-row passes over `layers` (Int8Linear and Int4Linear modules) at each candidate
    distance, sets the kernels to the fastest and returns each candidate's median pass in seconds."""
    compiled = kernels()
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
            compiled.int8_set_prefetch_bytes(bytes_ahead)
            passes[bytes_ahead].append(one_pass())
    medians = {bytes_ahead: statistics.median(times) for bytes_ahead, times in passes.items()}
    fastest = min(medians, key=medians.get)
    compiled.int8_set_prefetch_bytes(fastest)
    log.info(
        "int8/int4 weight prefetch: %d bytes ahead (median pass ms: %s)",
        fastest,
        ", ".join(f"{bytes_ahead}: {seconds * 1e3:.2f}" for bytes_ahead, seconds in medians.items()),
    )
    return medians
