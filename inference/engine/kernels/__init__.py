"""The engine's hand-written CPU kernels (C++, AVX2 and up), built on first use and cached.

`torch.utils.cpp_extension.load` compiles them with the machine's g++ (11 or later, for the AMX
version; about two minutes, once; `make install` does it up front) into
~/.cache/torch_extensions, and rebuilds when a source changes. `kernels()` returns the module,
or None where they cannot run (no AVX2, no compiler): callers then keep their torch path, which
is also the CUDA path.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import time
from pathlib import Path

import torch

from ..env import cache_home, env_bool

log = logging.getLogger(__name__)
NAME = "minivllm_kernels"
STALE_LOCK_S = 600  # a build takes ~2 min; a lock this old was left by a killed one
# C++ by concern: common/ (bindings, ISA choice, SIMD helpers), int8/, groups/ (4- and 8-bit groups),
# blocks/ (GGUF blocks), floats/ (f16 / bf16 / f32), experts/ (mixture-of-experts linears over either),
# attention/, layers/ (a decoder layer's fused halves, RMSNorm, RoPE). Every .cpp below is built;
# includes are written from this folder ("common/simd.h").
SOURCE_DIR = Path(__file__).parent
# where the last build's module file is, and the sources it was built from (source_hash)
BUILD_RECORD = cache_home() / "kernels-build.json"


def sources() -> list[str]:
    return sorted(str(p) for p in SOURCE_DIR.glob("*/*.cpp"))


# -ffp-contract=off: no fused multiply-adds the source did not ask for, so the elementwise
# kernels round exactly as the torch expressions they replace.
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-fopenmp"]


class KernelsUnavailable(RuntimeError):
    pass


@functools.cache
def kernels():
    """The compiled module, or None (the reason is logged once). MINIVLLM_CPU_KERNELS=0 says None
    without building: every layer then runs its device-generic torch path, the one CUDA takes,
    which is how that path is tested on a CPU."""
    if not env_bool("MINIVLLM_CPU_KERNELS", True):
        log.info("MINIVLLM_CPU_KERNELS=0: the torch paths, no C++ kernels")
        return None
    try:
        return load()
    except KernelsUnavailable as error:
        log.warning("CPU kernels unavailable, using the torch paths: %s", error)
        return None


def load():
    """Builds (when needed) and imports the kernels; raises KernelsUnavailable saying why not."""
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX"):  # AVX2, AVX512, ...
        raise KernelsUnavailable(f"the kernels need AVX2; this CPU offers {capability}")
    built = _built_before()
    if built is not None:
        return built
    from torch.utils import cpp_extension

    try:
        _clear_stale_lock(Path(cpp_extension._get_build_directory(NAME, verbose=False)) / "lock")
        module = cpp_extension.load(
            name=NAME,
            sources=sources(),
            extra_include_paths=[str(SOURCE_DIR)],
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
        )
    except (RuntimeError, OSError, ImportError) as error:  # no compiler, no ninja, a build error
        raise KernelsUnavailable(str(error)) from error
    _remember_build(module)
    return module


@functools.cache
def source_hash() -> str:
    """Every kernel source's name and bytes, the build flags and torch's version, hashed: what a build is of."""
    digest = hashlib.sha256(f"{FLAGS}|{torch.__version__}".encode())
    for path in sorted([*SOURCE_DIR.glob("*/*.cpp"), *SOURCE_DIR.glob("*/*.h")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _built_before():
    """The module built from exactly these sources, imported straight from its file, or None.
    cpp_extension.load imports setuptools and runs ninja to find out (~0.2 s of every start)."""
    try:
        record = json.loads(BUILD_RECORD.read_text())
        if record.get("sources") != source_hash() or record.get("file") != _file_identity(record["path"]):
            return None  # other sources, or the module file rebuilt since (another checkout's build)
        spec = importlib.util.spec_from_file_location(NAME, record["path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (OSError, ValueError, KeyError, ImportError):
        return None


def _remember_build(module) -> None:
    try:
        BUILD_RECORD.parent.mkdir(parents=True, exist_ok=True)
        record = {"sources": source_hash(), "path": module.__file__, "file": _file_identity(module.__file__)}
        partial = BUILD_RECORD.with_name(f"{BUILD_RECORD.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(record))
        partial.replace(BUILD_RECORD)
    except (OSError, AttributeError, TypeError):
        pass


def _file_identity(path: str) -> list[int] | None:
    """The module file's size, time and inode: a rebuild in place changes them."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def _clear_stale_lock(lock: Path) -> None:
    """A build killed midway leaves its lock file behind, and cpp_extension would wait on it forever."""
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
            log.warning("removed a stale kernel build lock: %s", lock)
    except FileNotFoundError:
        pass
