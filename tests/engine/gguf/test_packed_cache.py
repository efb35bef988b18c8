"""A GGUF's packed weights written at its first start and mapped at the next: the same bytes and the
same logits, never a stale or short file, nothing written when turned off, one cache per file."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.gguf import checkpoint as gguf_checkpoint
from inference.engine.gguf import packed_cache
from inference.engine.layers.linear.blocks import BlockLinear
from inference.engine.layers.linear.groups import GroupLinear
from tests.support.engine_helpers import prefill_logits
from tests.support.gguf_files import write_block_gguf, write_tiny_gguf

pytestmark = pytest.mark.real_model  # the embedded GGUF's tokenizer, in the files written here
# block, float and group weights; a fused Q/K/V of mixed types, a fused gate/up of 4- and 8-bit groups
TYPES = {"attn_q": "f16", "ffn_up": "q5_k", "attn_output": "q4_0", "ffn_gate": "q8_0"}
GROUPS = {"attn_output": "q4_1", "ffn_gate": "q8_0", "ffn_up": "q4_0", "ffn_down": "q8_0"}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_checkpoint, "CACHE_ROOT", tmp_path / "cache")


def started(path: str, **options) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(every packed weight, the logits of one prefill) of an engine started on the file; its cache written."""
    engine = LLMEngine(EngineConfig(model=path, device="cpu", **options))
    packed = [m.packed.clone() for m in engine.bundle.model.modules() if isinstance(m, (BlockLinear, GroupLinear))]
    logits = prefill_logits(engine, [1, 17, 300, 4000, 9, 12])
    packed_cache.wait_for_writes()
    return packed, logits


def mapped(caplog) -> bool:
    return any("packed weights read from" in r.getMessage() for r in caplog.records)


def copied(caplog) -> bool:
    return any("copied to memory" in r.getMessage() for r in caplog.records)


def data_file(tmp_path):
    (folder,) = (tmp_path / "cache").glob("*-packed")
    (path,) = folder.glob("packed-*.bin")
    return path


WRITERS = {
    "mixed": lambda folder: write_block_gguf(folder / "m.gguf", types=TYPES),
    "groups": lambda folder: write_block_gguf(folder / "m.gguf", types=GROUPS),
    # Q4_1 matrices, a tied Q8_0 embedding: every weight a GroupLinear
    "groups alone": lambda folder: write_tiny_gguf(folder / "groups.gguf", "q4_1"),
}


@pytest.mark.parametrize("kind", WRITERS)
def test_the_next_start_maps_the_same_bytes_and_computes_the_same_logits(tmp_path, caplog, kind):
    """Group weights (Q4_0 / Q4_1 / Q8_0) too: packing them took ~1 s of each load of a Q8_0 0.5B."""
    path = WRITERS[kind](tmp_path)
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        first, first_logits = started(path)
        assert not mapped(caplog)
        assert data_file(tmp_path).is_file()
        caplog.clear()
        second, second_logits = started(path)
        assert mapped(caplog)
    assert len(first) == len(second) > 0 and all(torch.equal(a, b) for a, b in zip(first, second))
    assert torch.equal(first_logits, second_logits)


def test_a_short_file_or_another_packer_is_packed_again(tmp_path, caplog):
    path = write_block_gguf(tmp_path / "m.gguf")
    _, logits = started(path)
    data = data_file(tmp_path)
    folder = data.parent
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        _, again = started(path)
        assert not mapped(caplog)
    assert torch.equal(again, logits)
    manifest = json.loads((folder / packed_cache.MANIFEST_NAME).read_text())
    (folder / packed_cache.MANIFEST_NAME).write_text(json.dumps({**manifest, "key": "an older packer's"}))
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        _, again = started(path)
        assert not mapped(caplog)
    assert torch.equal(again, logits)


def test_turned_off_nothing_is_written(tmp_path):
    assert EngineConfig.from_env({"MINIVLLM_PACKED_CACHE": "0"}).packed_cache is False
    started(write_block_gguf(tmp_path / "m.gguf"), packed_cache=False)
    assert not list((tmp_path / "cache").glob("*-packed"))


def test_a_changed_files_old_cache_is_removed_and_another_files_kept(tmp_path):
    other = write_block_gguf(tmp_path / "other.gguf", seed=3)
    started(other)
    (kept,) = (tmp_path / "cache").glob("*-packed")
    path = write_block_gguf(tmp_path / "m.gguf", seed=1)
    started(path)
    old = set((tmp_path / "cache").glob("*-packed")) - {kept}
    write_block_gguf(tmp_path / "m.gguf", seed=2)  # the same path, new bytes: a new cache folder
    started(path)
    new = set((tmp_path / "cache").glob("*-packed")) - {kept}
    assert len(old) == len(new) == 1 and new != old and kept.is_dir()


def test_a_link_to_a_file_shares_its_caches(tmp_path, caplog):
    """A models folder of links (to a download cache, say) maps the file's packed weights instead
    of parsing and packing each link again."""
    path = write_block_gguf(tmp_path / "m.gguf", types=GROUPS)
    started(path)
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "linked.gguf").symlink_to(path)
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        started(str(folder / "linked.gguf"))
    assert mapped(caplog)
    assert len(list((tmp_path / "cache").glob("*-packed"))) == 1


@pytest.mark.parametrize("in_huge_pages, lockable", [(True, True), (False, True), (True, False)])
def test_weights_in_4kb_pages_or_unlockable_are_copied_else_mapped(tmp_path, monkeypatch, caplog, in_huge_pages, lockable):
    """Where the page cache holds the file in 4 KB pages (a file system without large folios), a
    decode step's page walks would cost ~30%, and where the map cannot be locked, reclaim may take its
    pages between requests: the weights are copied into memory instead."""
    path = write_block_gguf(tmp_path / "m.gguf", types=TYPES)
    first, logits = started(path)
    monkeypatch.setattr(packed_cache, "_huge_mapped_bytes", lambda address: (1 << 40) if in_huge_pages else 0)
    monkeypatch.setattr(packed_cache, "_lock", lambda data: lockable)
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        second, again = started(path)
    assert mapped(caplog) and copied(caplog) is not (in_huge_pages and lockable)
    assert all(torch.equal(a, b) for a, b in zip(first, second)) and torch.equal(logits, again)


def test_locked_weights_stay_mapped_in_the_page_caches_2mb_pages(monkeypatch):
    """Locking a writable private map write-faulted every page to break its copy-on-write: the
    weights were copied into anonymous 4 KB pages and their 2 MB mapping split, which the load
    had just checked for (the embedded GGUF: its packed weights are ~92 MB)."""
    packed_of = lambda engine: next(m.packed for m in engine.bundle.model.modules() if isinstance(m, GroupLinear))  # noqa: E731
    LLMEngine(EngineConfig(device="cpu"))
    packed_cache.wait_for_writes()
    at_load, locked = [], []
    check, lock = packed_cache._huge_mapped_bytes, packed_cache._lock
    monkeypatch.setattr(packed_cache, "_huge_mapped_bytes", lambda address: at_load.append(check(address)) or at_load[-1])
    monkeypatch.setattr(packed_cache, "_lock", lambda data: locked.append(lock(data)) or locked[-1])
    engine = LLMEngine(EngineConfig(device="cpu"))
    if not at_load or at_load[0] < 64 << 20 or locked != [True]:
        pytest.skip("the file is not in 2 MB folios here, or the map may not be locked: the weights were copied")
    assert check(packed_of(engine).data_ptr()) == at_load[0]  # still mapped so once locked
