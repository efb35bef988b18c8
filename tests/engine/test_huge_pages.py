"""The engine package turns on huge pages for torch's large CPU allocations (inference/engine/__init__.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SCRIPT = """
import torch
import inference.engine
weights = torch.ones(64 * 2**20 // 4)  # 64 MB, as the first allocation of any size
print(next(int(line.split()[1]) for line in open('/proc/self/smaps_rollup') if line.startswith('AnonHugePages')))
"""


def huge_page_kib(env_value: str | None) -> int:
    env = {"PATH": "/usr/bin:/bin"}
    if env_value is not None:
        env["THP_MEM_ALLOC_ENABLE"] = env_value
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not THP_MODE.exists() or "[never]" in THP_MODE.read_text(), reason="no transparent huge pages here")
def test_importing_the_engine_gives_large_tensors_huge_pages_unless_opted_out():
    assert huge_page_kib(None) >= 32 * 1024
    assert huge_page_kib("0") == 0
