"""Model loading: the embedded GGUF, local HF folders, hub ids, and clear errors for the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.device import resolve_dtype
from inference.engine.errors import UnsupportedModelError
from inference.engine.loader import EMBEDDED_GGUF, ModelLoadError, load_model, resolve_source


def test_default_is_the_embedded_smollm2_gguf():
    source = resolve_source(None)
    assert source.gguf_file == EMBEDDED_GGUF and os.path.isfile(os.path.join(source.path, EMBEDDED_GGUF))
    assert source.display_name == "SmolLM2-135M-Instruct.Q4_1"


def test_gguf_path_and_hub_id_are_told_apart(tmp_path):
    gguf = resolve_source(os.path.join(resolve_source(None).path, EMBEDDED_GGUF))
    assert gguf.gguf_file == EMBEDDED_GGUF and not gguf.is_hub_id
    assert resolve_source("TinyLlama/TinyLlama-1.1B-Chat-v1.0").is_hub_id
    assert resolve_source(str(tmp_path)).path == str(tmp_path)
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        resolve_source(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelLoadError, match="not found"):
        resolve_source("./no/such/folder")


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_gpt2_dir"])
def test_local_hf_folder_loads_into_our_model_code(fixture, request):
    folder = request.getfixturevalue(fixture)
    bundle = load_model(EngineConfig(model=folder, dtype="float32", device="cpu"))
    assert type(bundle.model).__module__.startswith("inference.engine.models")
    assert bundle.name == os.path.basename(folder) and bundle.max_model_len == 512
    assert bundle.eos_token_ids == {2} and bundle.dtype == torch.float32


def test_max_model_len_setting_caps_the_context(tiny_llama_dir):
    bundle = load_model(EngineConfig(model=tiny_llama_dir, dtype="float32", max_model_len=128))
    assert bundle.max_model_len == 128


def test_unsupported_architecture_names_what_is_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(
        UnsupportedModelError,
        match="gemma3_text, gemma4, gemma4_text, gpt2, llama, mistral, mixtral, olmoe, phi3, qwen2, qwen3, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_moe, smollm3",
    ):
        load_model(EngineConfig(model=str(tmp_path)))


def test_hub_id_without_network_says_so():
    """The real hub code path runs; offline mode only spares the test the HTTP retries."""
    code = (
        "from inference.engine.loader import load_model, ModelLoadError\n"
        "from inference.engine.config import EngineConfig\n"
        "try:\n    load_model(EngineConfig(model='gpt2'))\n"
        "except ModelLoadError as exc:\n    print('ERROR', exc)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "ERROR could not fetch 'gpt2' from the Hugging Face hub (no network access" in result.stdout


def test_auto_dtype_on_cpu_is_float32_which_our_kernels_take():
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16


def test_auto_dtype_on_a_gpu_is_bf16_only_where_the_gpu_computes_it(monkeypatch):
    # a T4 or V100: torch counts its emulated bf16 as support unless told not to; float16 runs far faster there
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # Ampere on
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


def test_config_reads_the_environment():
    cfg = EngineConfig.from_env(
        {
            "MINIVLLM_MODEL": "/models/x.gguf",
            "MINIVLLM_MAX_NUM_SEQS": "4",
            "MINIVLLM_PREFIX_CACHING": "0",
            "MINIVLLM_DTYPE": "float32",
        }
    )
    assert (cfg.model, cfg.max_num_seqs, cfg.enable_prefix_caching, cfg.dtype) == ("/models/x.gguf", 4, False, "float32")
    assert EngineConfig.from_env({}).block_size == 16
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="int3")


LOAD_AND_LIST_MODULES = """
import json, sys
from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
LLMEngine(EngineConfig(device="cpu", max_num_seqs=2, kv_cache_mb=16))
print(json.dumps(sorted(m for m in ("torch._dynamo", "sympy", "accelerate") if m in sys.modules)))
"""


def test_loading_the_embedded_gguf_imports_none_of_the_heavy_modules():
    """torch._dynamo (~70 MB resident), sympy and accelerate (pulled in by transformers' config
    classes and AutoTokenizer): the server's memory target has no room for them. A start after the
    first, which `make install` makes, reads the GGUF's cache."""
    from inference.engine.gguf.checkpoint import GGUFCheckpoint
    from inference.engine.loader import embedded_model_source

    source = embedded_model_source()
    GGUFCheckpoint.open(os.path.join(source.path, source.gguf_file))  # the cache, as make install leaves it
    out = subprocess.run(
        [sys.executable, "-c", LOAD_AND_LIST_MODULES],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_config_field_the_model_needs_and_the_file_lacks_is_named_in_one_line(tmp_path):
    """A GGUF whose converter left out a key our code cannot derive (here the norms' epsilon, taken
    out of the file's cached config) stops the load with a ModelLoadError naming the field, not an
    AttributeError's traceback."""
    from inference.engine.gguf.checkpoint import cache_dir
    from tests.support.gguf_files import write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    load_model(EngineConfig(model=path, device="cpu"))  # caches the config
    cached = cache_dir(path) / "config.json"
    config = json.loads(cached.read_text())
    del config["rms_norm_eps"]
    cached.write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"^the llama config of .*tiny\.gguf has no 'rms_norm_eps'") as error:
        load_model(EngineConfig(model=path, device="cpu"))
    assert "\n" not in str(error.value)
