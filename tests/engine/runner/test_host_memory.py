"""runner/host_memory.py: with the thresholds set, a step's 32 MiB buffer (32 rows of a 262,144-token
vocabulary's logits) comes from malloc's heap, where it stays for the next step, not from a mapping
of its own that glibc's defaults make for it, and unmap, at every step (each time faulted in and
zeroed afresh)."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys

import pytest

MAPPED = """
import ctypes, torch
{setup}
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = MallInfo2
for _ in range(3):  # allocated and freed as steps do, then held
    torch.empty(8 * 2**20).fill_(1.0)
logits = torch.empty(8 * 2**20).fill_(1.0)
print(mallinfo2().hblkhd)  # bytes malloc holds in mappings of their own
"""


def mapped_bytes(setup: str) -> int:
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"}  # inference/engine/__init__.py's default, set before torch allocates
    out = subprocess.run([sys.executable, "-c", MAPPED.format(setup=setup)], capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.strip().splitlines()[-1])


def has_mallinfo2() -> bool:
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")


@pytest.mark.skipif(not has_mallinfo2(), reason="a glibc setting, read through mallinfo2 (glibc 2.33+)")
def test_a_steps_big_buffer_comes_from_the_heap_not_a_mapping_of_its_own():
    from inference.engine.runner.host_memory import keep_step_buffers

    if not keep_step_buffers():
        pytest.skip("this glibc refuses a 64 MiB mmap threshold (older releases cap it at 32 MiB)")
    assert mapped_bytes("import inference.engine") >= 32 * 2**20  # glibc's defaults: mapped for itself
    kept = mapped_bytes("from inference.engine.runner.host_memory import keep_step_buffers\nassert keep_step_buffers()")
    assert kept < 32 * 2**20, kept
