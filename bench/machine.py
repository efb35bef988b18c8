"""What the numbers were measured on: CPU, cores, memory, load, versions, commit, date."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _lscpu() -> dict[str, str]:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return None


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
        return out.stdout.strip() + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# The flags our kernels and the weight-format choice read (layers/linear, kernels/common/cpu_isa.cpp).
ISA_FLAGS = {
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
}


def machine_info() -> dict:
    import psutil
    import torch
    import transformers

    cpu = _lscpu()
    flags = _cpu_flags()
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu.get("Model name") or platform.processor() or "unknown",
        "cpus": os.cpu_count(),
        "cores_per_socket": cpu.get("Core(s) per socket"),
        "threads_per_core": cpu.get("Thread(s) per core"),
        "memory_gib": _memory_gib(),
        "bf16_instructions": sorted(flags & {"avx512_bf16", "amx_bf16"}),
        "isa_flags": sorted(flags & ISA_FLAGS),
        "load_average_at_start": os.getloadavg(),
        # the load average still counts whatever ran a minute ago; this is the CPU in use right now
        "cpu_busy_percent_at_start": psutil.cpu_percent(interval=3.0),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        "os": platform.platform(),
        "git_commit": _git_commit(),
    }
