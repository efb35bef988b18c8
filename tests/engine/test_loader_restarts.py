"""A model that loads once loads every time (issue 70): each of the loader's routes from a GGUF, loaded
twice with its config cached, in this process and in a fresh one, gives transformers' greedy tokens.

The fresh process is where it broke: a cached GGUF's tokenizer is read on a background thread, and
a load that reached transformers' reader while that thread was importing transformers failed with
`cannot import name 'AutoModelForCausalLM'` (engine/transformers_lock.py). Its first load is the
route through transformers' reader, so the race is there to be lost. The routes:
- in place (gguf/weights.py): a float32 file under `auto`, as F16 files went already;
- our de-quantizing reader (gguf/dense.py): Gemma 4, whose layout transformers reads only in part;
- transformers' reader: a float32 Qwen3.5 file under MINIVLLM_QUANT=none.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.gguf.checkpoint import cache_dir
from tests.support.engine_helpers import generated_ids, greedy, hf_greedy, run_to_completion
from tests.support.llama_convert import convert_to_gguf, tiny_gemma4_folder, tiny_qwen35_folder

PROMPT = "Once upon a time, in a land far away, there lived a"
TOKENS = 10
ROOT = Path(__file__).resolve().parents[2]
FRESH_PROCESS = """
import json, sys
from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from tests.support.engine_helpers import generated_ids, greedy, run_to_completion

answers = {}
for name, path, quantization in json.loads(sys.argv[1]):  # transformers' reader first: the race is there
    engine = LLMEngine(EngineConfig(model=path, device="cpu", quantization=quantization))
    engine.add_request(name, engine.tokenize(sys.argv[2]), greedy(int(sys.argv[3])))
    answers[name] = {"route": engine.bundle.weights_format, "ids": generated_ids(run_to_completion(engine)[name])}
print("ANSWERS " + json.dumps(answers))
"""


ROUTES = {"transformers": "none", "dense": "none", "in place": "gguf"}  # the weights format each route reports
ROUTE_LOG = {  # what the load's `weights:` line says of each route (loader._bundle)
    "transformers": lambda line: "GGUF's own" not in line and "de-quantized" not in line,
    "dense": lambda line: "de-quantized one by one" in line,
    "in place": lambda line: "from the GGUF's own blocks" in line,
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{route: (the GGUF, MINIVLLM_QUANT, the prompt's ids, transformers' greedy tokens from the folder
    the file was converted from)}, each file at a path of its own (a cache of its own), loaded once
    here: the first start, which caches its config."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("restarts")
    qwen = tiny_qwen35_folder(root / "qwen35")
    gemma = tiny_gemma4_folder(root / "gemma4")
    qwen_file = convert_to_gguf(qwen, root / "qwen35-f32.gguf", extra_args=("--no-mtp",))
    reader_file = root / "qwen35-f32-reader.gguf"
    reader_file.write_bytes(qwen_file.read_bytes())
    routes = {
        "transformers": (reader_file, "none", qwen),
        "dense": (convert_to_gguf(gemma, root / "gemma4-f32.gguf"), "none", gemma),
        "in place": (qwen_file, "auto", qwen),
    }
    cases = {}
    for route, (path, quantization, folder) in routes.items():
        ids = LLMEngine(EngineConfig(model=str(path), device="cpu", quantization=quantization)).tokenize(PROMPT)
        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        cases[route] = (path, quantization, ids, hf_greedy(hf, ids, TOKENS))
    return cases


@pytest.mark.parametrize("route", list(ROUTES))
def test_each_route_loads_again_with_its_config_cached(files, route, caplog):
    path, quantization, ids, expected = files[route]
    assert (cache_dir(str(path)) / "index.json").is_file()  # the first start cached it
    for start in range(2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="minivllm.engine"):
            engine = LLMEngine(EngineConfig(model=str(path), device="cpu", quantization=quantization))
        line = next(r.message for r in caplog.records if r.message.startswith("weights: "))
        assert engine.bundle.weights_format == ROUTES[route] and ROUTE_LOG[route](line), line
        engine.add_request("c", ids, greedy(TOKENS))
        assert generated_ids(run_to_completion(engine)["c"]) == expected, f"start {start + 2}"


def test_every_route_loads_in_a_fresh_process_with_its_config_cached(files):
    order = [[route, str(path), quantization] for route, (path, quantization, _, _) in files.items()]
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(order), PROMPT, str(TOKENS)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.split("ANSWERS ", 1)[1])
    assert answers == {route: {"route": ROUTES[route], "ids": expected} for route, (_, _, _, expected) in files.items()}
