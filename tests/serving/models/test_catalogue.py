"""The catalogue: which files and folders of MINIVLLM_MODELS_DIR are models, and their ids."""

from __future__ import annotations

import pytest

from inference.engine.config import EngineConfig
from inference.engine.loader import ModelLoadError
from inference.serving.models.catalogue import build_catalogue, folder_models
from inference.serving.models.keep_alive import parse_keep_alive


def test_gguf_files_folders_and_split_parts(tmp_path):
    (tmp_path / "qwen-coder.gguf").write_bytes(b"x")
    for part in (1, 2, 3):
        (tmp_path / f"big-model-0000{part}-of-00003.gguf").write_bytes(b"x")
    (tmp_path / "llama-hf").mkdir()
    (tmp_path / "llama-hf" / "config.json").write_text("{}")
    (tmp_path / "notes").mkdir()  # no config.json, no GGUF: not a model
    (tmp_path / "kimi").mkdir()  # llama-server's layout: a split model's parts in a folder of its own
    for part in (2, 1):
        (tmp_path / "kimi" / f"kimi-IQ1_S-0000{part}-of-00002.gguf").write_bytes(b"x")
    (tmp_path / "gemma-vision").mkdir()  # a model beside its vision projector
    (tmp_path / "gemma-vision" / "gemma-3-4b-it-Q8_0.gguf").write_bytes(b"x")
    (tmp_path / "gemma-vision" / "mmproj-F16.gguf").write_bytes(b"x")
    (tmp_path / "README.md").write_text("not a model")
    (tmp_path / ".hidden.gguf").write_bytes(b"x")
    found = folder_models(str(tmp_path))
    assert list(found) == ["big-model", "gemma-vision", "kimi", "llama-hf", "qwen-coder"]
    assert found["big-model"].endswith("big-model-00001-of-00003.gguf")
    assert found["kimi"].endswith("kimi/kimi-IQ1_S-00001-of-00002.gguf")
    assert found["gemma-vision"].endswith("gemma-vision/gemma-3-4b-it-Q8_0.gguf")


def test_an_unreadable_folder_says_so(tmp_path):
    with pytest.raises(ModelLoadError, match="MINIVLLM_MODELS_DIR"):
        folder_models(str(tmp_path / "missing"))


def test_the_start_model_comes_first_and_once(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"x")
    (tmp_path / "b.gguf").write_bytes(b"x")
    start = EngineConfig(model=str(tmp_path / "b.gguf"))
    specs = build_catalogue(start, served_name=None, models_dir=str(tmp_path))
    assert [spec.name for spec in specs] == ["b", "a"]  # b is the start model, not listed twice
    assert specs[1].config.model.endswith("a.gguf") and specs[1].config.device == start.device
    assert specs[0].answers_to(str(tmp_path / "b.gguf")) and not specs[0].answers_to("a")
    named = build_catalogue(start, served_name="coder", models_dir=str(tmp_path))
    assert [spec.name for spec in named] == ["coder", "a"]


def test_the_embedded_model_by_default():
    [spec] = build_catalogue(EngineConfig(), served_name=None, models_dir=None)
    assert spec.name == "SmolLM2-135M-Instruct.Q4_1" and spec.config.model is None


@pytest.mark.parametrize(
    ("given", "seconds"),
    [(None, None), (300, 300.0), ("300", 300.0), ("5m", 300.0), ("1h30m", 5400.0), ("-1", -1.0), ("0", 0.0), ("1.5s", 1.5)],
)
def test_keep_alive_durations(given, seconds):
    assert parse_keep_alive(given) == seconds


@pytest.mark.parametrize("given", ["soon", "5 minutes", "", "m", True, [1]])
def test_keep_alive_refuses_what_is_not_a_duration(given):
    with pytest.raises(ValueError, match="keep_alive"):
        parse_keep_alive(given)
