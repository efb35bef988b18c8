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
def cpu_has_native_bf16() -> bool:
    """bf16 is only faster than float32 on CPUs with AVX512-BF16 or AMX; elsewhere it is emulated."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def resolve_dtype(requested: str, device: torch.device) -> torch.dtype:
    if requested != "auto":
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]
