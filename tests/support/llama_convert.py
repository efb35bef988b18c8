"""Tiny GGUFs of the hybrid families (Qwen3.5's Gated DeltaNet, Gemma 4), written by llama.cpp's own
converter: gguf-py alone cannot say how llama.cpp lays such a file out (it renames, reorders and
shifts tensors: `ssm_a` is -exp(A_log), V heads are re-tiled, zero-centred norms get +1), and a loader
checked against files we wrote ourselves would only agree with itself.

The converter is `convert_hf_to_gguf.py` of the llama.cpp tree vendored in the llama-cpp-python sdist
that bench/llama_server.py builds llama-server from (same version, same cache); it runs in a
subprocess of this interpreter with the tree's own gguf-py first on PYTHONPATH (newer than the pinned
gguf package under the same version number). Folders with a `tokenizer.json` (what save_pretrained
writes for SmolLM2's and Gemma's fast tokenizers) convert without `sentencepiece`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from bench.llama_server import CACHE, VERSION


def llama_cpp_tree() -> Path:
    """The vendored llama.cpp source, the sdist downloaded (pip) and unpacked into CACHE the first time."""
    source = CACHE / f"llama-cpp-python-{VERSION}"
    if not source.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        sdist = CACHE / f"llama_cpp_python-{VERSION}.tar.gz"
        if not sdist.is_file():
            pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps"]
            subprocess.run([*pip, f"llama-cpp-python=={VERSION}", "-d", str(CACHE)], check=True)
        with tarfile.open(sdist) as archive:
            archive.extractall(CACHE, filter="data")
        shutil.move(str(CACHE / f"llama_cpp_python-{VERSION}"), str(source))
    return source / "vendor" / "llama.cpp"


def converter_path() -> Path:
    return llama_cpp_tree() / "convert_hf_to_gguf.py"


def convert_to_gguf(hf_folder: Path, out_path: Path, outtype: str = "f32", extra_args=()) -> Path:
    """`hf_folder` (save_pretrained's model + tokenizer) as a GGUF at `out_path`; the converter's log on
    failure. Converted once per folder content: the converter's file is kept in CONVERTED under the
    digest of the folder's files, the converter's version and its arguments (a Gemma 4 conversion
    takes ~30 s; the same seed writes the same bytes), and later runs copy it."""
    kept = CONVERTED / f"{_digest(hf_folder, outtype, extra_args)}.gguf"
    if not kept.is_file():
        CONVERTED.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{kept.stem}.{os.getpid()}.partial")
        _run_converter(hf_folder, partial, outtype, extra_args)
        partial.replace(kept)  # whole or not at all: a converter killed midway leaves no file here
    shutil.copyfile(kept, out_path)
    return Path(out_path)


CONVERTED = CACHE / "converted"


def _digest(hf_folder: Path, outtype: str, extra_args) -> str:
    digest = hashlib.sha256(f"{VERSION} {outtype} {list(extra_args)}".encode())
    for file in sorted(Path(hf_folder).iterdir()):
        if file.is_file():
            digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()[:32]


def _run_converter(hf_folder: Path, out_path: Path, outtype: str, extra_args) -> None:
    script = converter_path()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(script.parent / "gguf-py"), os.environ.get("PYTHONPATH")]))
    )
    command = [sys.executable, str(script), str(hf_folder), "--outtype", outtype, "--outfile", str(out_path), *extra_args]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


QWEN35_TINY = dict(
    vocab_size=49152,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    # llama.cpp's rope asserts sum(mrope sections) <= head_dim; the default [11, 11, 10] needs head_dim >= 32.
    # Text positions are the same in every section, so any split of the 2 rotated pairs is plain rope.
    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25, mrope_section=[1, 1, 0]),
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=False,
)


def tiny_qwen35_folder(path: Path, tokenizer=None, seed: int = 0, **overrides) -> Path:
    """A random 4-layer Qwen3.5 text model (3 Gated DeltaNet layers, then full attention) saved at `path`
    with `tokenizer` (the embedded SmolLM2's by default). Convert with `extra_args=("--no-mtp",)`: the
    text-only class has no MTP weights, and without the flag the converter asserts it finds some."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    if tokenizer is None:
        from transformers import AutoTokenizer

        from inference.engine.loader import embedded_model_source

        source = embedded_model_source()
        tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    return _save(Qwen3_5ForCausalLM, Qwen3_5TextConfig(**{**QWEN35_TINY, **overrides}), tokenizer, path, seed)


GEMMA4_TINY = dict(
    vocab_size=262144,  # Gemma's tokenizer: the converter crops token_embd to the tokenizer's size
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    # llama.cpp's KV sharing is hard-wired: a shared layer reuses layer first_shared-2 if sliding, else
    # first_shared-1, so the last two unshared layers must be [sliding, full] for HF and llama.cpp to agree.
    layer_types=["sliding_attention"] * 3 + ["full_attention", "sliding_attention", "full_attention"],
    num_kv_shared_layers=2,
    sliding_window=16,
    max_position_embeddings=512,
    hidden_size_per_layer_input=8,  # per-layer embeddings, as in E2B/E4B; 0 drops them
    use_double_wide_mlp=True,  # the shared layers' MLP twice as wide, as in E2B
    final_logit_softcapping=30.0,
)


def tiny_gemma4_folder(path: Path, tokenizer=None, seed: int = 0, **overrides) -> Path:
    """A random 6-layer Gemma 4 text model (sliding window, 2 KV-shared layers, per-layer embeddings) saved
    at `path` with `tokenizer`, by default Gemma 3 270M's (the real GGUF `make real-gguf` fetches): the
    converter writes Gemma 4's own tokenizer model and needs Gemma's vocabulary."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    if tokenizer is None:
        from inference.engine.gguf.checkpoint import GGUFCheckpoint
        from tests.support.real_gguf import GEMMA3

        if GEMMA3.present() is None:
            raise FileNotFoundError(f"{GEMMA3.path()} is missing: `make real-gguf` fetches it")
        # the file's tokenizer as our loader caches it (~1 s; transformers' GGUF conversion took ~15 s a call)
        tokenizer = GGUFCheckpoint.open(str(GEMMA3.path())).tokenizer
    return _save(Gemma4ForCausalLM, Gemma4TextConfig(**{**GEMMA4_TINY, **overrides}), tokenizer, path, seed)


def _save(model_class, config, tokenizer, path: Path, seed: int, soften=None) -> Path:
    """Random weights, every 1-D parameter and saved buffer (norms, A_log, dt_bias, Gemma 4's layer
    scalars) moved off its initial value, so a loader that misses one of the converter's transforms
    (+1 norms, -exp(A_log), head reordering) or one of these tensors shows it."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for tensor in model.state_dict().values():  # (the tensors themselves: parameters and saved buffers)
            if tensor.ndim == 1 and tensor.is_floating_point():
                tensor.add_(torch.randn_like(tensor) * 0.1)
        if soften is not None:
            soften(model)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def quantizer_path() -> Path | None:
    """llama.cpp's llama-quantize where it was built beside llama-server (`cmake --build build
    --target llama-quantize` in the same tree), else None."""
    from bench.llama_server import binary_path

    path = binary_path().parent / "llama-quantize"
    return path if path.is_file() else None


def quantize(source: Path, out_path: Path, kind: str) -> Path:
    """`source` re-quantized by llama-quantize to `kind` ("Q4_K_M", ..., or "F32": a quantized file de-quantized)."""
    command = [str(quantizer_path()), "--allow-requantize", str(source), str(out_path), kind]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama-quantize failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return Path(out_path)


def llama_server_greedy(path: Path, prompt_ids: list[int], tokens: int) -> list[int] | None:
    """llama-server's greedy continuation of `prompt_ids` on the file (one slot, 2 threads), as ids;
    None where llama-server is not built."""
    answers = llama_server_greedies(path, [prompt_ids], tokens)
    return None if answers is None else answers[0]


def llama_server_greedies(path: Path, prompts: list[list[int]], tokens: int, context: int = 1024) -> list[list[int]] | None:
    """llama_server_greedy of each prompt, from one server."""
    from bench.llama_server import LlamaServer, binary_path

    if not binary_path().is_file():
        return None
    import httpx

    answers = []
    with LlamaServer(str(path), slots=1, context=context) as server:
        for prompt_ids in prompts:
            body = {"prompt": prompt_ids, "n_predict": tokens, "temperature": 0, "top_k": 1, "cache_prompt": False}
            reply = httpx.post(f"{server.base_url}/completion", json={**body, "return_tokens": True}, timeout=120).json()
            answers.append(reply["tokens"])
    return answers
