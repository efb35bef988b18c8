"""runner/host_memory.py: with the thresholds set, a step's 32 MiB buffer allocated and freed again
and again is served from the heap (no page faults after the first), where glibc's defaults map it
afresh each time, its pages faulted in (huge pages, as the engine asks torch for them) and zeroed."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

LOOP = """
import resource, torch
{setup}
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.empty(8 * 2**20).fill_(1.0)  # warm the allocator
before = faults()
for _ in range(20):
    torch.empty(8 * 2**20).fill_(1.0)  # 32 MiB, as 32 rows of a 262,144-token vocabulary's logits
print(faults() - before)
"""


def minor_faults(setup: str) -> int:
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"}  # inference/engine/__init__.py's default, set before torch allocates
    out = subprocess.run([sys.executable, "-c", LOOP.format(setup=setup)], capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="a glibc setting")
def test_a_steps_big_buffer_is_reused_not_faulted_in_each_time():
    default = minor_faults("import inference.engine")
    kept = minor_faults("from inference.engine.runner.host_memory import keep_step_buffers\nassert keep_step_buffers()")
    assert default >= 20 * 16, default  # each allocation's 16 huge pages (or 8,192 small ones) faulted in again
    assert kept * 10 < default, (kept, default)
