"""The shared memory budget (serving/models/memory_budget.py): each model's part of the KV plan,
what a load needs, and the KV plan taking its share without going under one full context."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from inference.engine.config import EngineConfig
from inference.engine.kv_cache import memory_plan
from inference.engine.kv_cache.memory_plan import MB, plan_num_blocks
from inference.serving.models import memory_budget
from inference.serving.models.catalogue import ModelSpec


def specs(count: int) -> list[ModelSpec]:
    return [ModelSpec(f"m{i}", EngineConfig(model=f"/models/m{i}.gguf")) for i in range(count)]


def test_models_split_the_kv_budget_by_how_many_can_be_loaded_together():
    assert memory_budget.shared(specs(1), together=4) == specs(1)  # alone: the whole plan
    three = memory_budget.shared(specs(3), together=4)
    assert [spec.config.kv_share for spec in three] == [1 / 3] * 3
    # a GPU's share stays whole: the weights must fit in it, so splitting would refuse a model that fits alone
    assert three[0].config.gpu_memory_utilization == EngineConfig().gpu_memory_utilization
    six = memory_budget.shared(specs(6), together=2)
    assert {spec.config.kv_share for spec in six} == {0.5}
    assert [spec.name for spec in six] == [spec.name for spec in specs(6)]


def test_a_share_shrinks_the_planned_pool_but_never_below_one_full_context(monkeypatch):
    monkeypatch.setattr(memory_plan.psutil, "virtual_memory", lambda: SimpleNamespace(available=24 * 1024 * MB))
    shape = (30, 3, 64)  # SmolLM2: 23 KB of bfloat16 K and V a token

    def tokens(share, max_model_len):
        return 16 * plan_num_blocks(shape, 16, torch.bfloat16, torch.device("cpu"), None, 0.9, max_model_len, share=share)

    alone, quarter = tokens(1.0, 2048), tokens(0.25, 2048)
    assert quarter < alone / 3 and quarter >= 2048  # a quarter (each part rounds up to a whole MB)
    assert tokens(0.25, 40000) >= 40000  # a long context keeps its floor whatever the share


def test_a_load_needs_its_files_and_its_share(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_budget.psutil, "virtual_memory", lambda: SimpleNamespace(available=8 * 1024 * MB))
    single = tmp_path / "one.gguf"
    single.write_bytes(b"x" * 3000)
    for part in (1, 2):
        (tmp_path / f"big-0000{part}-of-00002.gguf").write_bytes(b"x" * 1000)
    (tmp_path / "big-other-00001-of-00002.gguf").write_bytes(b"x" * 7)  # another split model beside it
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 500)
    (folder / "pytorch_model.bin").write_bytes(b"x" * 900)  # the same weights again: not counted twice
    (folder / "config.json").write_text("{}")
    assert memory_budget.weight_bytes(str(single)) == 3000
    assert memory_budget.weight_bytes(str(tmp_path / "big-00001-of-00002.gguf")) == 2000
    assert memory_budget.weight_bytes(str(folder)) == 500
    assert memory_budget.weight_bytes(None) == 0 and memory_budget.weight_bytes(str(tmp_path / "gone.gguf")) == 0
    spec = ModelSpec("one", EngineConfig(model=str(single), kv_share=0.5))
    assert memory_budget.needed_bytes(spec) == 3000 + 512 * MB + memory_budget.HEADROOM_BYTES  # half of the 1 GB cap
    assert memory_budget.fits(spec)
    monkeypatch.setattr(memory_budget.psutil, "virtual_memory", lambda: SimpleNamespace(available=200 * MB))
    assert not memory_budget.fits(spec)  # 25 MB of KV and 256 MB of headroom: more than 200 MB
    assert memory_budget.fits(spec, spare_bytes=100 * MB)  # ... unless a model just unloaded gives 100 MB back
