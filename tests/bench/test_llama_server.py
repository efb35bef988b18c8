"""The peer's build: the fix that lets llama.cpp's native build run its AMX kernels."""

from __future__ import annotations

import pytest

from bench.llama_server import AMX_TILE_BROKEN, AMX_TILE_FILE, fix_amx_tile_state


def _tree(tmp_path, body: str):
    path = tmp_path / AMX_TILE_FILE
    path.parent.mkdir(parents=True)
    path.write_text(body)
    return path


def test_the_amx_tile_fix_applies_once_and_keeps_the_rest_of_the_source(tmp_path):
    source = '#include "mmq.h"\ninline void ggml_tile_config_init(void) {\n' + AMX_TILE_BROKEN + "    tc.palette_id = 1;\n}\n"
    path = _tree(tmp_path, source)
    assert fix_amx_tile_state(tmp_path) is True
    fixed = path.read_text()
    assert AMX_TILE_BROKEN not in fixed and "static thread_local tile_config_t tc" in fixed
    assert "ARCH_REQ_XCOMP_PERM" in fixed and "#include <sys/syscall.h>" in fixed
    assert fixed.endswith("    tc.palette_id = 1;\n}\n") and '#include "mmq.h"\ninline void' in fixed
    assert fix_amx_tile_state(tmp_path) is False and path.read_text() == fixed  # a rebuild patches nothing twice


def test_a_source_without_the_expected_lines_is_refused(tmp_path):
    _tree(tmp_path, "inline void ggml_tile_config_init(void) {}\n")
    with pytest.raises(RuntimeError, match="not where the fix expects it"):
        fix_amx_tile_state(tmp_path)
