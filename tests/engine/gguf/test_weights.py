"""GGUF blocks loaded straight into grouped weights: transformers' de-quantized values exactly, no float32
copy left, the config / tokenizer / index cached, and which format `auto` picks for which checkpoint."""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.gguf import checkpoint as gguf_checkpoint
from inference.engine.kernels import kernels
from inference.engine.layers import linear as formats
from inference.engine.layers.linear import GroupLinear, choose_format
from inference.engine.layers.linear.blocks import FileEmbedding
from inference.engine.loader import load_model
from tests.support.gguf_files import LAYERS, write_tiny_gguf

pytestmark = pytest.mark.real_model  # the embedded GGUF, read and served

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def xdg_cache(tmp_path_factory):
    """A cache home of this session's own: the files below are parsed once, then read from it."""
    return tmp_path_factory.mktemp("xdg")


@pytest.fixture(autouse=True)
def session_cache(xdg_cache, monkeypatch):
    monkeypatch.setattr(gguf_checkpoint, "CACHE_ROOT", xdg_cache / "minivllm" / "gguf")


@pytest.fixture(scope="session")
def gguf_file(tmp_path_factory):
    """Tiny GGUFs by (matrix type, embedding type, tied), each written once."""
    written = {}

    def get(kind: str = "q4_1", embedding: str = "q8_0", tied: bool = True) -> str:
        key = (kind, embedding, tied)
        if key not in written:
            written[key] = write_tiny_gguf(
                tmp_path_factory.mktemp("gguf") / f"{kind}-{embedding}-{tied}.gguf", kind, embedding=embedding, tied=tied
            )
        return written[key]

    return get


def hf_reference(path: str) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    folder, name = os.path.split(path)
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).state_dict()


def weight_of(linear: GroupLinear) -> torch.Tensor:
    return kernels().group_dequantize_rows(linear.packed, torch.arange(linear.out_features), linear.in_features, linear.bits)


def assert_same_weights(model, reference: dict[str, torch.Tensor], layers: int) -> None:
    for i in range(layers):
        hf, ours = f"model.layers.{i}.", model.layers[i]
        fused = {"self_attn.qkv_proj": ["q", "k", "v"], "mlp.gate_up_proj": ["gate", "up"]}
        for path_in_layer, parts in fused.items():
            prefix = path_in_layer.split(".")[0]
            expected = torch.cat([reference[f"{hf}{prefix}.{p}_proj.weight"] for p in parts])
            assert torch.equal(weight_of(ours.get_submodule(path_in_layer)), expected), (i, path_in_layer)
        assert torch.equal(weight_of(ours.self_attn.o_proj), reference[hf + "self_attn.o_proj.weight"])
        assert torch.equal(weight_of(ours.mlp.down_proj), reference[hf + "mlp.down_proj.weight"])
        assert torch.equal(ours.input_layernorm.weight, reference[hf + "input_layernorm.weight"])
    head = reference.get("lm_head.weight", reference["model.embed_tokens.weight"])
    assert torch.equal(weight_of(model.lm_head), head)
    ids = torch.tensor([0, 17, 49151])
    assert torch.equal(model.embed_tokens(ids), reference["model.embed_tokens.weight"][ids])


def test_the_embedded_q4_1_blocks_give_transformers_dequantized_weights_bit_for_bit(real_hf_model, caplog):
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        bundle = load_model(EngineConfig(device="cpu"))
    assert "from the GGUF's own blocks" in caplog.text
    assert_same_weights(bundle.model, real_hf_model.state_dict(), 30)
    assert bundle.model.layers[0].mlp.down_proj.bits == 4 and bundle.model.lm_head.bits == 8  # Q4_1 layers, Q8_0 embedding


def test_q4_0_blocks_and_an_untied_output_give_transformers_weights_bit_for_bit(gguf_file):
    path = gguf_file("q4_0", tied=False)
    bundle = load_model(EngineConfig(model=path, device="cpu"))
    assert_same_weights(bundle.model, hf_reference(path), LAYERS)
    embedding = bundle.model.embed_tokens  # a Q8_0 embedding of its own beside the Q4_0 output, read from the file
    assert bundle.model.lm_head.bits == 4 and isinstance(embedding, FileEmbedding) and embedding.kind == "q8_0"


def large_float32_tensors(smallest: int) -> dict[int, tuple[int, ...]]:
    """Every live float32 CPU tensor with storage of at least `smallest` values, by data pointer."""
    gc.collect()
    found = {}
    for t in gc.get_objects():
        if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device.type == "cpu" and t.numel() >= smallest:
            try:
                found[t.data_ptr()] = tuple(t.shape)
            except RuntimeError:  # no storage (a meta or fake tensor): holds no weights
                continue
    return found


def test_no_float32_copy_of_the_weights_stays_referenced(gguf_file):
    path = gguf_file()
    smallest_matrix = 32 * 64  # K/V's rows times the hidden size
    before = large_float32_tensors(smallest_matrix)  # other tests' models, the reference's
    bundle = load_model(EngineConfig(model=path, device="cpu"))
    rotary = {bundle.model.rotary.cos.data_ptr(), bundle.model.rotary.sin.data_ptr()}
    new = {ptr: shape for ptr, shape in large_float32_tensors(smallest_matrix).items() if ptr not in before and ptr not in rotary}
    assert not new, list(new.values())
    assert any(isinstance(m, GroupLinear) for m in bundle.model.modules())


def test_the_index_config_and_tokenizer_are_cached_and_a_damaged_cache_is_read_again(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(gguf_checkpoint, "CACHE_ROOT", tmp_path / "cache")  # empty: this test parses the file
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    first = gguf_checkpoint.GGUFCheckpoint.open(path)
    assert first.tokenizer is not None  # the tokenizer's parse, beside the weights' packing, ends by writing the cache
    cache = gguf_checkpoint.cache_dir(path)
    assert (cache / "index.json").is_file() and (cache / "tokenizer.json").is_file()
    again = gguf_checkpoint.GGUFCheckpoint.open(path)
    assert again.tensors == first.tensors and again.weight_type == "q4_1"
    assert again.tokenizer("hello world").input_ids == first.tokenizer("hello world").input_ids
    (cache / "index.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="minivllm.engine"):
        third = gguf_checkpoint.GGUFCheckpoint.open(path)
    assert "unreadable" in caplog.text and third.tensors == first.tensors
    os.utime(path, ns=(1, 1))  # the file changed: its cache is another one
    assert gguf_checkpoint.cache_dir(path) != cache


@pytest.mark.parametrize("kind, expected", [("q4_1", "int4"), ("q4_0", "int4"), ("q8_0", "q8_0"), ("f32", "gguf")])
def test_auto_keeps_each_gguf_kind_in_its_own_format(gguf_file, kind, expected, caplog):
    path = gguf_file(kind, embedding="f32" if kind == "f32" else "q8_0", tied=kind != "q4_0")
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        bundle = load_model(EngineConfig(model=path, device="cpu"))
    line = next(r.message for r in caplog.records if r.message.startswith("weights: "))
    assert line.startswith(f"weights: {expected} ("), line
    gate_up = bundle.model.layers[0].mlp.gate_up_proj
    # a float32 file's matrices are read in place too, as F16 ones (issue 70), not through transformers' reader
    assert type(gate_up).__name__ == {"int4": "GroupLinear", "q8_0": "GroupLinear", "gguf": "FloatLinear"}[expected]


def test_an_explicit_format_wins_over_the_checkpoint(gguf_file):
    path = gguf_file()
    bundle = load_model(EngineConfig(model=path, device="cpu", quantization="int8"))
    assert type(bundle.model.layers[0].mlp.gate_up_proj).__name__ == "Int8Linear"


@pytest.mark.parametrize("checkpoint", ["bfloat16", "float16"])
def test_16_bit_checkpoints_get_bf16_weights_only_where_the_cpu_multiplies_bf16(checkpoint, monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(formats, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    assert choose_format("auto", checkpoint=checkpoint, device=cpu).format == "bf16"
    monkeypatch.setattr(formats, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert choose_format("auto", checkpoint=checkpoint, device=cpu).format == "none"
    assert choose_format("auto", checkpoint="float32", device=cpu).format == "none"


def test_cuda_keeps_the_torch_paths():
    assert choose_format("auto", checkpoint="q4_1", device=torch.device("cuda")).format == "none"


CAPPED_RUN = """
import dataclasses, json, logging, pathlib, sys, torch
from inference.engine.gguf import checkpoint as gguf_checkpoint
from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.kernels import kernels
from inference.engine.sample.sampling_params import SamplingParams
records = []
logging.getLogger("minivllm.engine").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})())
logging.getLogger("minivllm.engine").setLevel(logging.INFO)
gguf_checkpoint.CACHE_ROOT = pathlib.Path(sys.argv[2])
engine = LLMEngine(dataclasses.replace(EngineConfig.from_env(), model=sys.argv[1], device="cpu", max_num_seqs=2))
engine.add_request("a", [1, 2, 3, 4, 5], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
tokens = []
while engine.has_work():
    tokens += [t for out in engine.step() for t in out.token_ids]
print(json.dumps({"isa": kernels().vector_isa(), "tokens": tokens, "weights": next(m for m in records if m.startswith("weights: "))}))
"""


def test_every_cpu_capability_gets_the_checkpoint_format_and_the_same_tokens(gguf_file, vector_isas):
    """Capped with MINIVLLM_CPU_ISA, which reaches the kernels through EngineConfig.from_env (a
    process each, as a deployment sets it): the same choice, the kernel version named, and the same
    greedy tokens from every version."""
    path = gguf_file()
    gguf_checkpoint.GGUFCheckpoint.open(path)  # parsed here once, read from the cache by each process
    runs = {}
    for isa in vector_isas:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("MINIVLLM_")}, "MINIVLLM_CPU_ISA": isa}
        out = subprocess.run(
            [sys.executable, "-c", CAPPED_RUN, path, str(gguf_checkpoint.CACHE_ROOT)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        runs[isa] = json.loads(out.stdout.strip().splitlines()[-1])
    for isa, run in runs.items():
        assert run["isa"] == isa and run["weights"].startswith("weights: int4 (") and f"({isa})" in run["weights"], run
    assert len({tuple(run["tokens"]) for run in runs.values()}) == 1 and len(runs[vector_isas[0]]["tokens"]) == 8
