"""Resolve the `auto` device and dtype choices into concrete torch values."""
from __future__ import annotations

import functools

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("MINIVLLM_DEVICE asks for cuda, but no CUDA device is available")
    return torch.device(requested)


@functools.cache
def _cpuinfo_field(name: str) -> str:
    """The first value of a /proc/cpuinfo field ("" where there is none, e.g. off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> frozenset[str]:
    return frozenset(_cpuinfo_field("flags").split())


def cpu_vendor() -> str:
    """"GenuineIntel", "AuthenticAMD", ..."""
    return _cpuinfo_field("vendor_id")


def bf16_beats_float32(flags: frozenset[str]) -> bool:
    """Only AMX tiles make bf16 faster than float32 on a CPU.

    AVX512-BF16 alone is not enough: on such a Xeon (no AMX) bf16 matmuls at 32 rows ran at
    ~140 GFLOP/s against float32's ~175, HF generate at batch 32 made 253 tok/s in bf16 against
    309 in float32, and our engine 285 against 359 (docs/performance.md, section 19).
    """
    return "amx_bf16" in flags


def resolve_dtype(requested: str, device: torch.device) -> torch.dtype:
    if requested != "auto":
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if bf16_beats_float32(cpu_flags()) else torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]
