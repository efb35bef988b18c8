"""bench/kernel_rows.py: every version this CPU runs timed on the same shapes, the raw result written."""

from __future__ import annotations

import json

import pytest

from bench import kernel_rows
from inference.engine.kernels import kernels


def test_each_version_is_timed_per_shape_and_row_count(tmp_path, monkeypatch):
    cpp = kernels()
    if cpp is None:
        pytest.skip("the C++ kernels did not build here")
    monkeypatch.setattr(kernel_rows, "GROUP_SHAPES", [(32, 64, 4)])
    monkeypatch.setattr(kernel_rows, "BLOCK_SHAPES", [("q4_k", 16, 256), ("q6_k", 16, 256)])
    monkeypatch.setattr(kernel_rows, "ROWS", (1, 17))
    out = tmp_path / "rows.json"
    kernel_rows.main(["--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    isas = kernel_rows.ISAS_BY_REACH[: kernel_rows.ISAS_BY_REACH.index(cpp.linear_isa()) + 1]
    assert {(r["kernel"], r["rows"], r["isa"]) for r in rows} == {
        (kernel, rows, isa) for kernel in ("group q4", "q4_k", "q6_k") for rows in (1, 17) for isa in isas
    }
    assert all(r["ms"] > 0 and r["gops"] > 0 for r in rows)
