"""The embedded SmolLM2's real weights requantized by llama.cpp's own `llama-quantize` to the mixes
people download (Q4_K_M, Q5_K_M, Q6_K, Q8_0): every block de-quantizes as gguf-py's; teacher-forced
greedy tokens agree with llama.cpp's llama-server on the same file on >= 90% of positions, and (Q4_K_M
and Q8_0: the block and the group kernels) with transformers' float32 model of the same de-quantized
weights on >= 95%.

llama-quantize and llama-server are built by `make llama-cpp` (CI runs it; bench/llama_server.py, ~10 min, once, in
~/.cache/minivllm/llama.cpp); where they have not been built these tests say so and skip. Real
k-quant blocks reach every kernel without llama.cpp too: tests/engine/kernels/test_real_blocks.py
checks them on a Q4_K_M file llama.cpp wrote (Gemma 3 270M), which `make test` fetches.
"""

from __future__ import annotations

import os
import subprocess

import httpx
import numpy as np
import pytest
import torch

from bench.llama_server import CRASHES, LlamaServer, binary_path
from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.gguf import checkpoint as gguf_checkpoint
from inference.engine.loader import embedded_model_source
from tests.engine.layers.linear.test_quality import PROMPTS
from tests.support.engine_helpers import generated_ids, greedy, prefill_logits, run_to_completion

pytestmark = pytest.mark.real_model

MIXES = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")
# the float32 reference: the block kernel's mix and the group kernel's file; every mix's blocks are
# also held bit for bit to gguf-py below (the C++ de-quantizer's rows) and every mix's tokens to llama-server's
TRANSFORMERS_MIXES = ("Q4_K_M", "Q8_0")
PROMPT_COUNT, POSITIONS = 10, 32  # 320 teacher-forced positions a file


@pytest.fixture(scope="module")
def quantizer():
    """llama.cpp's llama-quantize, checked before anything else runs: without it every test here skips at once."""
    binary = binary_path("native").parent / "llama-quantize"
    if not binary.is_file():
        pytest.skip("llama.cpp's llama-quantize is not built here (`make llama-cpp` builds it; real blocks: test_real_blocks.py)")
    return binary


@pytest.fixture(scope="module", autouse=True)
def own_cache(tmp_path_factory):
    """The requantized files' parsed config and tokenizer go to a cache of this module's own, not ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_checkpoint, "CACHE_ROOT", tmp_path_factory.mktemp("cache"))
        yield


@pytest.fixture(scope="module")
def requantized(tmp_path_factory, quantizer):
    folder, made = tmp_path_factory.mktemp("requantized"), {}

    def get(mix: str) -> str:
        if mix not in made:
            source = embedded_model_source()
            out = folder / f"smollm2-{mix}.gguf"
            subprocess.run(
                [str(quantizer), "--allow-requantize", os.path.join(source.path, source.gguf_file), str(out), mix],
                check=True,
                capture_output=True,
            )
            made[mix] = str(out)
        return made[mix]

    return get


@pytest.fixture(scope="module")
def texts(quantizer):
    """Each prompt with a greedy continuation to teacher-force (our own, on the embedded model)."""
    engine = LLMEngine(EngineConfig(device="cpu", kv_cache_mb=64, max_num_seqs=PROMPT_COUNT))
    for i, prompt in enumerate(PROMPTS[:PROMPT_COUNT]):
        engine.add_request(str(i), engine.tokenize(prompt), greedy(POSITIONS))
    results = run_to_completion(engine)
    return [engine.tokenize(p) + generated_ids(results[str(i)]) for i, p in enumerate(PROMPTS[:PROMPT_COUNT])]


def positions(ids: list[int]) -> slice:
    return slice(len(ids) - POSITIONS - 1, len(ids) - 1)


def ours(path: str, texts) -> list[list[int]]:
    engine = LLMEngine(EngineConfig(model=path, device="cpu", kv_cache_mb=64, max_num_seqs=4))
    assert engine.bundle.weights_format in ("gguf", "q8_0")
    return [prefill_logits(engine, ids).argmax(-1)[positions(ids)].tolist() for ids in texts]


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for row_a, row_b in zip(a, b) for x, y in zip(row_a, row_b)]
    assert len(pairs) == PROMPT_COUNT * POSITIONS
    return sum(x == y for x, y in pairs) / len(pairs)


@pytest.mark.parametrize("mix", MIXES)
def test_every_tensor_llama_quantize_wrote_dequantizes_as_gguf_py_does(requantized, mix):
    from gguf import GGUFReader, quants

    from inference.engine.kernels import kernels

    reader = GGUFReader(requantized(mix))
    kinds = set()
    for tensor in reader.tensors:
        kind, columns = tensor.tensor_type.name.lower(), int(tensor.shape[0])
        if tensor.n_elements == columns:  # vectors: float32 norms
            continue
        raw = torch.from_numpy(np.array(tensor.data).reshape(-1).view(np.uint8))  # a copy: gguf maps the file read-only
        rows = torch.tensor([0, 1, int(tensor.n_elements // columns) - 1])
        reference = quants.dequantize(np.asarray(tensor.data)[rows.numpy()], tensor.tensor_type)
        assert torch.equal(kernels().gguf_dequantize_rows(raw, columns, kind, rows), torch.from_numpy(reference)), tensor.name
        kinds.add(kind)
    assert kinds - {"f32", "f16"}, kinds  # the mix's own block types were among them


@pytest.mark.parametrize("mix", TRANSFORMERS_MIXES)
def test_greedy_tokens_agree_with_transformers_float32_model(requantized, texts, mix):
    """transformers' Llama over the file's weights as our torch de-quantizer reads them (held bit for
    bit to gguf-py's in tests/engine/gguf/test_dequantize.py; transformers' own GGUF reading
    de-quantizes the same in Python, ~10 s a file slower). The file's config is our reader's: the
    Llama cases of test_blocks_loading.py hold it to transformers' own reading."""
    from tests.support.gguf_reference import reference_model

    path = requantized(mix)
    hf = reference_model(path)
    with torch.no_grad():
        reference = [hf(torch.tensor([ids])).logits[0].argmax(-1)[positions(ids)].tolist() for ids in texts]
    share = agreement(ours(path, texts), reference)
    assert share >= 0.95, f"{mix}: {share:.1%} of positions agree with transformers' float32 model"


def llama_server_choices(path: str, texts) -> list[list[int]]:
    """llama-server's greedy next token after every prefix (its prompt cache keeps each request short)."""
    try:
        server = LlamaServer(path, slots=1, context=2048).__enter__()
    except RuntimeError as error:
        pytest.skip(f"llama-server does not start here: {error}")
    try:
        choices = []
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            for ids in texts:
                row = []
                for end in range(positions(ids).start, positions(ids).stop):
                    body = {
                        "prompt": ids[: end + 1],
                        "n_predict": 1,
                        "temperature": 0,
                        "cache_prompt": True,
                        "return_tokens": True,
                    }
                    row.append(client.post("/completion", json=body).json()["tokens"][0])
                choices.append(row)
        return choices
    finally:
        server.__exit__(None, None, None)


@pytest.mark.parametrize("mix", MIXES)
def test_greedy_tokens_agree_with_llama_server_on_the_same_file(requantized, texts, mix):
    if not binary_path("native").is_file():
        pytest.skip("llama.cpp's llama-server is not built here (`make llama-cpp` builds it)")
    path = requantized(mix)
    share = agreement(ours(path, texts), llama_server_choices(path, texts))
    assert share >= 0.90, f"{mix}: {share:.1%} of positions agree with llama-server"


assert CRASHES  # LlamaServer falls back to the build without AMX where the native one crashes starting


def test_a_moe_file_llama_quantize_wrote_computes_what_transformers_computes(tmp_path, quantizer):
    """A tiny Qwen3-MoE written in F16 and quantized to Q4_K_M by llama.cpp's own quantizer: its
    3-D expert tensors as llama.cpp lays them out, read in place, against transformers' Qwen3-MoE
    over the same de-quantized weights (the row-error bound of test_blocks_loading.py)."""
    from inference.engine.layers.experts import ExpertLinear
    from inference.engine.loader import load_model
    from tests.engine.gguf.test_blocks_loading import row_errors
    from tests.support.gguf_files import write_block_gguf
    from tests.support.gguf_reference import reference_model

    roles = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "token_embd", "output")
    f16 = write_block_gguf(tmp_path / "moe-f16.gguf", "qwen3moe", types={role: "f16" for role in roles}, tied=False)
    path = str(tmp_path / "moe-q4_k_m.gguf")
    subprocess.run([str(quantizer), f16, path, "Q4_K_M"], check=True, capture_output=True)
    bundle = load_model(EngineConfig(model=path, device="cpu"))
    kinds = {m.kind for m in bundle.model.modules() if isinstance(m, ExpertLinear)}
    assert (
        kinds
        and kinds <= {"q4_k", "q5_k", "q6_k"}
        and all(m.packed is not None for m in bundle.model.modules() if isinstance(m, ExpertLinear))
    )
    engine = LLMEngine(EngineConfig(model=path, device="cpu", num_kv_blocks=16), bundle=bundle)
    ids = torch.tensor(engine.tokenize("The quick brown fox jumps over the lazy dog, twice"))
    with torch.no_grad():
        reference = reference_model(path)(ids[None]).logits[0]
    errors = row_errors(prefill_logits(engine, ids), reference)
    assert errors.median() < 0.1 and errors.mean() < 0.25, errors
