"""Where an embedding model's pooling is read from (layers/pooling.py): a local sentence-transformers
folder, a hub repository's files (through the hub cache), a GGUF's `pooling_type`; the setting
overrides them, and a checkpoint that says nothing pools the last token."""

from __future__ import annotations

import json

import pytest

from inference.engine.layers.pooling import pooling_for


def sentence_transformers_files(folder, mode: str) -> None:
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "modules.json").write_text(
        json.dumps([{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
    )
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({f"pooling_mode_{mode}": True}))
    (folder / "config.json").write_text(json.dumps({"matryoshka_dimensions": [64, 32]}))


@pytest.mark.parametrize("mode, kind", [("cls_token", "cls"), ("mean_tokens", "mean"), ("lasttoken", "last")])
def test_a_local_sentence_transformers_folder_names_its_pooling(tmp_path, mode, kind):
    sentence_transformers_files(tmp_path, mode)
    pooling = pooling_for("auto", str(tmp_path))
    assert (pooling.kind, pooling.matryoshka_dimensions) == (kind, (32, 64)) and "sentence-transformers" in pooling.source
    assert pooling_for("last", str(tmp_path)).kind == "last"  # the setting wins


def test_a_hub_repository_is_read_through_the_hub_cache(tmp_path, monkeypatch):
    """A hub id (not a folder): its modules.json and Pooling config as the hub cache holds them
    (offline here: the cache is laid out as huggingface_hub writes it)."""
    from huggingface_hub import constants

    snapshot = tmp_path / "models--acme--tiny-embedder" / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    sentence_transformers_files(snapshot, "cls_token")
    (tmp_path / "models--acme--tiny-embedder" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-embedder" / "refs" / "main").write_text(snapshot.name)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    pooling = pooling_for("auto", "acme/tiny-embedder")
    assert (pooling.kind, pooling.matryoshka_dimensions) == ("cls", (32, 64))
    assert pooling_for("auto", "acme/not-in-the-cache").kind == "last"


@pytest.mark.parametrize("value, kind", [(1, "mean"), (2, "cls"), (3, "last"), (0, "last")])
def test_a_gguf_says_it_in_pooling_type(tmp_path, value, kind):
    from gguf import GGUFWriter

    path = tmp_path / "embedder.gguf"
    writer = GGUFWriter(str(path), "bert")
    writer.add_uint32("bert.pooling_type", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    pooling = pooling_for("auto", str(path))
    assert pooling.kind == kind and ("pooling_type" in pooling.source) == (value != 0)


def test_a_loaded_ggufs_pooling_type_is_read_from_its_cached_config(tmp_path, monkeypatch):
    """The first load's header scan keeps `pooling_type` in the cached config; later loads read it
    there instead of parsing the file's metadata again (~0.2 s for a large vocabulary)."""
    from gguf import GGUFWriter

    from inference.engine.gguf import checkpoint

    monkeypatch.setattr(checkpoint, "CACHE_ROOT", tmp_path / "cache")
    path = tmp_path / "embedder.gguf"
    writer = GGUFWriter(str(path), "bert")
    writer.add_uint32("bert.pooling_type", 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    found = {}
    checkpoint._parse_index(str(path), found)
    assert found["bert.pooling_type"] == 1 and found["general.architecture"] == "bert"
    cache = checkpoint.cache_dir(str(path))
    cache.mkdir(parents=True)
    (cache / "config.json").write_text('{"gguf_pooling_type": 2}')  # not what the file says: proves where it came from
    assert pooling_for("auto", str(path)).kind == "cls"
    (cache / "config.json").write_text('{"gguf_pooling_type": null}')
    assert pooling_for("auto", str(path)).kind == "last"
