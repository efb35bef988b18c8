"""The build's guard against a lock left by a killed compile (which would hang every later start)."""

from __future__ import annotations

import os
import time

from inference.engine.kernels import STALE_LOCK_S, _clear_stale_lock


def test_an_old_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    old, fresh = tmp_path / "old", tmp_path / "fresh"
    old.touch()
    fresh.touch()
    long_ago = time.time() - STALE_LOCK_S - 60
    os.utime(old, (long_ago, long_ago))
    _clear_stale_lock(old)
    _clear_stale_lock(fresh)
    _clear_stale_lock(tmp_path / "missing")
    assert not old.exists() and fresh.exists()


def test_every_cpp_file_under_a_concern_folder_is_built():
    from inference.engine.kernels import SOURCE_DIR, sources

    built = {os.path.relpath(path, SOURCE_DIR) for path in sources()}
    on_disk = {str(p.relative_to(SOURCE_DIR)) for p in SOURCE_DIR.rglob("*.cpp")}
    assert built == on_disk and all("/" in name for name in built)  # no file left at the top, none missed
    assert {name.split("/")[0] for name in built} == {"common", "int8", "groups", "blocks", "floats", "attention", "layers"}
