"""The grouped and block kernels alone, per version and row count: how much a step of many rows
gains from each instruction set (the AMX tiles against VNNI, say), on real models' matrix shapes.

Times `group_linear` (SmolLM2's Q4_1 shapes and its 8-bit lm_head) and `block_linear` (Qwen2.5-1.5B's
Q4_K and Q6_K shapes) with random weights at 1 to 256 rows, on every version this CPU runs, and
writes the milliseconds a call and the int8 operations a second (2 * rows * N * K / time).

    python -m bench.kernel_rows --out docs/bench/profiles/kernel_rows.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from inference.engine.kernels import kernels
from inference.engine.layers.linear.groups import quantize_groups, quantize_groups_8bit

from .machine import machine_info

GROUP_SHAPES = [(1536, 576, 4), (576, 1536, 4), (49152, 576, 8)]  # (N, K, bits): SmolLM2's MLP and lm_head
BLOCK_SHAPES = [("q4_k", 8960, 1536), ("q4_k", 1536, 8960), ("q6_k", 1536, 8960), ("q4_k", 2048, 1536)]  # Qwen2.5-1.5B's
ROWS = (1, 8, 16, 32, 64, 256)
ISAS_BY_REACH = ["avx2", "avx512bw", "avx512_vnni", "amx"]  # a CPU that runs one runs those before it


def timed(kernel, args: tuple, work: float) -> float:
    """Seconds a call of kernel(*args), over enough calls for ~1 s of the slowest version."""
    kernel(*args)
    reps = max(3, int(3e9 / (work + 3e7)))
    started = time.perf_counter()
    for _ in range(reps):
        kernel(*args)
    return (time.perf_counter() - started) / reps


BLOCK_BYTES = {"q4_k": (144, (0, 2)), "q6_k": (210, (208,))}  # a block of 256 weights: its bytes, where its float16 scales sit


def random_blocks(kind: str, N: int, K: int) -> torch.Tensor:
    """A [N, K] weight in `kind`'s blocks of random bytes, its float16 scales small and finite."""
    size, scales = BLOCK_BYTES[kind]
    generator = torch.Generator().manual_seed(1)
    blocks = torch.randint(0, 256, (N * K // 256, size), dtype=torch.uint8, generator=generator)
    for offset in scales:
        blocks[:, offset : offset + 2] = (
            (torch.rand(len(blocks), generator=generator) / 100).half().view(torch.uint8).reshape(-1, 2)
        )
    return blocks.reshape(-1)


def measure(isas: list[str]) -> list[dict]:
    cpp = kernels()
    rows_out = []
    for N, K, bits in GROUP_SHAPES:
        weight = (quantize_groups if bits == 4 else quantize_groups_8bit)(torch.randn(N, K) / 10)
        packed = cpp.group_pack_weight(*weight, bits)
        for M in ROWS:
            x = torch.randn(M, K)
            for isa in isas:
                s = timed(cpp.group_linear, (x, packed, N, bits, isa), M * N * K)
                rows_out.append(
                    {
                        "kernel": f"group q{bits}",
                        "N": N,
                        "K": K,
                        "rows": M,
                        "isa": isa,
                        "ms": s * 1e3,
                        "gops": 2 * M * N * K / s / 1e9,
                    }
                )
    for kind, N, K in BLOCK_SHAPES:
        packed = cpp.block_pack([random_blocks(kind, N, K)], K, kind)
        for M in ROWS:
            x = torch.randn(M, K)
            for isa in isas:
                s = timed(cpp.block_linear, (x, packed, N, kind, isa), M * N * K)
                rows_out.append(
                    {"kernel": kind, "N": N, "K": K, "rows": M, "isa": isa, "ms": s * 1e3, "gops": 2 * M * N * K / s / 1e9}
                )
    return rows_out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="write the raw result here (JSON)")
    args = p.parse_args(argv)
    cpp = kernels()
    isas = list(ISAS_BY_REACH[: ISAS_BY_REACH.index(cpp.linear_isa()) + 1])
    result = {"machine": machine_info(), "threads": torch.get_num_threads(), "rows": measure(isas)}
    for row in result["rows"]:
        print(
            f"{row['kernel']:8} {row['N']:>6}x{row['K']:<5} {row['rows']:>4} rows {row['isa']:12} {row['ms']:8.3f} ms {row['gops']:6.0f} GOPS"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
