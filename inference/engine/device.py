"""Resolve the `auto` device and dtype choices into concrete torch values."""

from __future__ import annotations

import functools

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MB = 1024 * 1024


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


def cpu_model_name() -> str:
    """ "AMD EPYC", "Intel(R) Xeon(R) Platinum 8592+", ... ("" where unknown)."""
    return _cpuinfo_field("model name")


def cpu_vendor() -> str:
    """ "GenuineIntel", "AuthenticAMD", ..."""
    return _cpuinfo_field("vendor_id")


def resolve_dtype(requested: str, device: torch.device) -> torch.dtype:
    """`auto` is float32 on every CPU: our kernels (the C++ layer, the int8, int4 and bf16 weight modes)
    take float32 activations, and a bf16 model runs the slower torch modules instead.

    Even with AMX a bf16 model did not pay: on a Xeon with AMX, engine alone, it made 25 / 173 /
    468 tok/s at 1 / 8 / 32 streams against float32's 42 / 189 / 459, and float32 with
    MINIVLLM_QUANT=bf16 (bf16 weights, oneDNN's GEMM) 37 / 249 / 676 (docs/performance-log.md, section 30).
    """
    if requested != "auto":
        return DTYPES[requested]
    if device.type == "cuda":  # bf16 where the GPU computes it (Ampere on); emulated bf16 (T4, V100) is far slower than float16
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    return torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]


def gpu_memory(device: str | None) -> dict:
    """The GPU's memory now, as /stats and a worker's heartbeat report it: used and total MB and the
    percent used; every figure None off CUDA or where the device cannot be asked."""
    none = {"gpu_memory_used_mb": None, "gpu_memory_total_mb": None, "gpu_memory_pct": None}
    if not device or not device.startswith("cuda"):
        return none
    try:
        free, total = torch.cuda.mem_get_info(torch.device(device))
    except Exception:
        return none
    used = total - free
    return {
        "gpu_memory_used_mb": round(used / MB, 1),
        "gpu_memory_total_mb": round(total / MB, 1),
        "gpu_memory_pct": round(100.0 * used / total, 2) if total else None,
    }
