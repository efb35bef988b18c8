"""The int8 prefetch distance is timed at load and the fastest one is kept."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from inference.engine.kernels import kernels
from inference.engine.layers.linear import FormatChoice, prefetch, prepare_linears
from inference.engine.layers.linear.int8 import Int8Linear, quantize_int8
from inference.engine.layers.linear.prefetch import CANDIDATE_BYTES, tune_weight_prefetch

pytestmark = pytest.mark.usefixtures("needs_cpu_kernels")  # the int8 kernel's prefetch


def int8_layers():
    torch.manual_seed(0)
    model = quantize_int8(nn.Sequential(nn.Linear(256, 1024), nn.Linear(1024, 256), nn.Linear(256, 96)))
    return [module for module in model.modules() if isinstance(module, Int8Linear)]


def test_keeps_the_candidate_with_the_fastest_median_pass(restore_prefetch):
    medians = tune_weight_prefetch(int8_layers(), candidates=(0, 64, 2048), rounds=3)
    assert set(medians) == {0, 64, 2048} and all(seconds > 0 for seconds in medians.values())
    assert kernels().weight_prefetch_bytes() == min(medians, key=medians.get)


def test_int8_quantization_at_load_tunes_the_distance(restore_prefetch):
    """prepare_linears (what the loader calls) leaves the kernel at a candidate it timed."""
    kernels().set_weight_prefetch_bytes(192)  # no candidate: only tuning can change it to one
    prepare_linears(nn.Sequential(nn.Linear(256, 512), nn.Linear(512, 64)), FormatChoice("int8", "test"), torch.device("cpu"))
    assert kernels().weight_prefetch_bytes() in CANDIDATE_BYTES


def test_the_distance_is_timed_once_per_machine_and_read_back_after(restore_prefetch, tmp_path, monkeypatch):
    monkeypatch.setattr(prefetch, "CACHE_FILE", tmp_path / "prefetch.json")
    layers = int8_layers()
    chosen = prefetch.prefetch_for(layers)
    assert chosen in CANDIDATE_BYTES and len(json.loads((tmp_path / "prefetch.json").read_text())) == 1
    kernels().set_weight_prefetch_bytes(192)

    def no_timing(*args, **kwargs):
        raise AssertionError("a cached distance was timed again")

    monkeypatch.setattr(prefetch, "tune_weight_prefetch", no_timing)
    assert prefetch.prefetch_for(layers) == chosen and kernels().weight_prefetch_bytes() == chosen
