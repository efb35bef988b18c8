"""The real GGUFs are what they are said to be: after the checksum, each header must name the
expected model and architecture (their PyPI packages' names say nothing about what they carry)."""

from __future__ import annotations

import dataclasses

from tests.support import real_gguf
from tests.support.gguf_files import write_tiny_gguf


def test_each_real_file_names_the_model_it_is_said_to_be():
    for file in real_gguf.FILES:
        file.file_or_skip()
        assert file.identity_error() is None, file.identity_error()


def test_a_file_that_verifies_but_names_another_model_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(real_gguf, "cache_home", lambda: tmp_path)
    write_tiny_gguf(tmp_path / "tiny.gguf")
    impostor = dataclasses.replace(
        real_gguf.GEMMA3,
        name="tiny.gguf",
        size=(tmp_path / "tiny.gguf").stat().st_size,
        sha256=real_gguf.sha256(tmp_path / "tiny.gguf"),
    )
    assert impostor.verified()  # the checksum holds ...
    assert impostor.ensure() == 1  # ... and the header does not name Gemma 3
    assert "not 'Gemma 3 270m' ('gemma3')" in capsys.readouterr().err
