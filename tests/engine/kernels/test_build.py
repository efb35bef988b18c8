"""The build's guard against a lock left by a killed compile (which would hang every later start)."""

from __future__ import annotations

import os
import time

import pytest

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
    folders = {"common", "int8", "groups", "blocks", "floats", "experts", "attention", "layers"}
    assert {name.split("/")[0] for name in built} == folders


@pytest.mark.usefixtures("needs_cpu_kernels")  # it reads back the built module
def test_a_later_start_imports_the_build_of_the_same_sources_straight_from_its_file(tmp_path, monkeypatch):
    import json

    from inference.engine import kernels as package

    built = package.kernels()
    record = tmp_path / "kernels-build.json"
    monkeypatch.setattr(package, "BUILD_RECORD", record)
    package._remember_build(built)
    remembered = json.loads(record.read_text())
    assert remembered["sources"] == package.source_hash() and remembered["path"] == built.__file__
    again = package._built_before()
    assert again is not None and again.__file__ == built.__file__ and hasattr(again, "block_linear")
    record.write_text(json.dumps({**remembered, "sources": "another build"}))  # sources changed since
    assert package._built_before() is None
    record.write_text(json.dumps({**remembered, "file": [1, 2, 3]}))  # the module file rebuilt since, by another checkout
    assert package._built_before() is None
    record.write_text(json.dumps({**remembered, "path": str(tmp_path / "gone.so")}))
    assert package._built_before() is None
    record.write_text("{not json")
    assert package._built_before() is None


def test_the_source_hash_covers_every_header_and_source():
    from inference.engine.kernels import SOURCE_DIR

    covered = {p.name for p in [*SOURCE_DIR.glob("*/*.cpp"), *SOURCE_DIR.glob("*/*.h")]}
    assert {p.name for p in SOURCE_DIR.rglob("*") if p.suffix in (".cpp", ".h")} <= covered
