"""A 1.5B model of a real shape for the benchmark: Qwen2.5-1.5B's layers (28 x 1536, 12 heads over
2 KV heads, 8960-wide MLP, Q/K/V biases, a tied 151,936-token embedding) with random weights,
written as an F16 GGUF and quantized by llama.cpp's own `llama-quantize` to Q4_K_M, the mix most
downloads come in. No 1B+ checkpoint ships on the package registries; speed does not depend on the
weights' values. The tokenizer is the embedded SmolLM2's, padded with unused tokens to Qwen's
vocabulary size, so the embedding, the output layer and the tokenizer cost what Qwen's do.

    python -m bench.shaped_model            # prints the Q4_K_M file's path (built once, ~3 min)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .llama_server import CACHE as LLAMA_CACHE
from .llama_server import VERSION, build
from .model_files import embedded_gguf

MODELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minivllm" / "models"
NAME = "qwen2.5-1.5b-shape-random"
SHAPE = {
    "block_count": 28,
    "context_length": 32768,
    "embedding_length": 1536,
    "feed_forward_length": 8960,
    "attention.head_count": 12,
    "attention.head_count_kv": 2,
}
VOCAB = 151936


def quantizer() -> Path:
    """llama-quantize, built in the same llama.cpp tree as llama-server (~1 min more, once)."""
    server = build()
    tree = LLAMA_CACHE / f"llama-cpp-python-{VERSION}" / "vendor" / "llama.cpp"
    binary = server.parent / "llama-quantize"
    if not binary.is_file():
        print("building llama-quantize (once, ~1 min) ...", flush=True)
        subprocess.run(
            ["cmake", "--build", "build", "--target", "llama-quantize", "-j", str(os.cpu_count() or 2)], cwd=tree, check=True
        )
    return binary


def tokenizer_writer(path: Path, architecture: str, name: str):
    """A GGUFWriter for `architecture` at `path` holding the embedded model's tokenizer padded to
    VOCAB and the file's name; the caller adds the shape's keys and the tensors
    (bench/shaped_moe.py's MoE shares it)."""
    from gguf import GGUFReader, GGUFWriter

    reader = GGUFReader(embedded_gguf())
    writer = GGUFWriter(str(path), architecture)
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "llama.", "general.architecture", "general.file_type", "general.name")):
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = value + [f"<|unused_{i}|>" for i in range(VOCAB - len(value))]
        elif key == "tokenizer.ggml.token_type":
            value = value + [5] * (VOCAB - len(value))  # llama.cpp's UNUSED
        element = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], element)
    writer.add_name(name)
    return writer


def write_f16(path: Path, seed: int = 0) -> None:
    from gguf import GGUFValueType

    writer = tokenizer_writer(path, "qwen2", "Qwen2.5-1.5B shape, random weights")
    for key, value in SHAPE.items():
        writer.add_uint32(f"qwen2.{key}", value)
    writer.add_float32("qwen2.rope.freq_base", 1000000.0)
    writer.add_float32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)
    assert GGUFValueType.UINT32  # the keys above are uint32, as llama.cpp's converter writes them
    rng = np.random.default_rng(seed)
    hidden, ffn, heads, kv = 1536, 8960, 12, 2
    head_dim = hidden // heads

    def tensor(name: str, *shape: int, std: float = 0.02) -> None:
        writer.add_tensor(name, rng.normal(0.0, std, size=shape).astype(np.float16 if len(shape) == 2 else np.float32))

    tensor("token_embd.weight", VOCAB, hidden)
    for i in range(SHAPE["block_count"]):
        b = f"blk.{i}."
        writer.add_tensor(b + "attn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(b + "ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        tensor(b + "attn_q.weight", hidden, hidden)
        tensor(b + "attn_k.weight", kv * head_dim, hidden)
        tensor(b + "attn_v.weight", kv * head_dim, hidden)
        tensor(b + "attn_q.bias", hidden)
        tensor(b + "attn_k.bias", kv * head_dim)
        tensor(b + "attn_v.bias", kv * head_dim)
        tensor(b + "attn_output.weight", hidden, hidden)
        tensor(b + "ffn_gate.weight", ffn, hidden)
        tensor(b + "ffn_up.weight", ffn, hidden)
        tensor(b + "ffn_down.weight", hidden, ffn)
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quantized(name: str, write: Callable[[Path], None], kind: str, f16_size: str) -> Path:
    """MODELS/<name>-<kind>.gguf, made the first time: `write` writes the F16 file, llama-quantize
    quantizes it, and the F16 intermediate is deleted after."""
    out = MODELS / f"{name}-{kind}.gguf"
    if out.is_file():
        return out
    MODELS.mkdir(parents=True, exist_ok=True)
    f16 = MODELS / f"{name}-F16.gguf.partial"
    print(f"writing {name} as F16 (random weights, {f16_size}, once) ...", flush=True)
    write(f16)
    partial = out.with_suffix(".partial")
    subprocess.run([str(quantizer()), str(f16), str(partial), kind], check=True, capture_output=True)
    partial.replace(out)
    f16.unlink()
    return out


def shaped_model(kind: str = "Q4_K_M") -> Path:
    """The quantized file, made the first time (the F16 intermediate is deleted after)."""
    return quantized(NAME, write_f16, kind, "~3 GB")


if __name__ == "__main__":
    print(shaped_model(*sys.argv[1:2]))


def random_hf_model(model_class, config, seed: int = 0):
    """transformers' `model_class(config)` in bfloat16, built without its random initialisation
    (inference/engine/models/no_init.py), every matrix filled with normal values of std 0.02 (the tied
    output layer once: it is the embedding); vectors (norms, scalars) as the constructor set them.
    Returns (model, the generator it drew from, for the caller's own draws)."""
    import torch

    from inference.engine.models.no_init import WithoutWeightInit

    generator = torch.Generator().manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.no_grad(), WithoutWeightInit():
            model = model_class(config)
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2:
                parameter.normal_(0.0, 0.02, generator=generator)
    model.config.dtype = torch.bfloat16
    return model, generator


def converted_and_quantized(
    out: Path, write_folder: Callable[[Path], object], kind: str, needed_gb: float, convert_args=()
) -> Path:
    """`out`, made the first time: `write_folder` writes an HF folder beside it, llama.cpp's own
    converter makes it an F16 file, llama-quantize makes that `kind`; the folder and the F16 file are
    deleted after (tests/support/llama_convert.py says why the converter, not gguf-py)."""
    import shutil
    import time

    from tests.support.llama_convert import convert_to_gguf, quantize, quantizer_path

    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(out.parent).free / 1e9
    if free_gb < needed_gb:
        raise SystemExit(
            f"{out.parent} has {free_gb:.1f} GB free; the intermediates and the {kind} file need ~{needed_gb:.0f} GB"
        )
    quantizer()  # llama-quantize, built beside llama-server the first time
    assert quantizer_path() is not None
    folder = out.with_name(f"{out.stem}-hf.partial")
    f16 = out.with_name(f"{out.stem}-F16.gguf.partial")
    partial = out.with_suffix(".partial")
    try:
        started = time.monotonic()
        print(f"writing {out.stem} as an HF folder (random weights, bfloat16, once) ...", flush=True)
        write_folder(folder)
        print(f"  {time.monotonic() - started:.0f} s; converting to F16 with convert_hf_to_gguf.py ...", flush=True)
        convert_to_gguf(folder, f16, outtype="f16", extra_args=convert_args)
        shutil.rmtree(folder)
        print(f"  {time.monotonic() - started:.0f} s; quantizing to {kind} with llama-quantize ...", flush=True)
        quantize(f16, partial, kind)
        partial.replace(out)
        print(f"  {time.monotonic() - started:.0f} s; done", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        f16.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return out
