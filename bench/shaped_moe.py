"""A mixture-of-experts model of a real shape for the benchmark: Qwen3-30B-A3B's layers with fewer
of them (LAYERS x 2048, 32 query heads over 4 KV heads of 128, Q/K norms, 128 experts of width 768
with 8 used per token, an untied 151,936-token output layer) with random weights, written as an F16
GGUF of llama.cpp's `qwen3moe` architecture and quantized by llama.cpp's own `llama-quantize` to
Q4_K_M. Speed does not depend on the weights' values; the router's are random too, so every expert
is picked about as often as any other. The tokenizer is bench/shaped_model.py's: the embedded
SmolLM2's, padded with unused tokens to Qwen's vocabulary size.

The F16 file is ~11 GB: it is written one tensor at a time (gguf-py's `add_tensor_info`, then
`write_tensor_data` per tensor), so at most one expert tensor (~0.8 GB as float32) is in memory.

    python -m bench.shaped_moe              # prints the Q4_K_M file's path and size (built once, ~15 min on 2 cores)
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from .shaped_model import MODELS, VOCAB, quantized, tokenizer_writer

NAME = "qwen3-30b-a3b-shape-8-layers-random"
LAYERS = 8  # Qwen3-30B-A3B has 48; the layers' shape is its own
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 4, 128
EXPERTS, EXPERTS_USED, EXPERT_FFN = 128, 8, 768
SHAPE = {  # qwen3moe.<key>, uint32 as llama.cpp's converter writes them
    "block_count": LAYERS,
    "context_length": 32768,
    "embedding_length": HIDDEN,
    "feed_forward_length": 6144,
    "attention.head_count": HEADS,
    "attention.head_count_kv": KV_HEADS,
    "attention.key_length": HEAD_DIM,
    "attention.value_length": HEAD_DIM,
    "expert_count": EXPERTS,
    "expert_used_count": EXPERTS_USED,
    "expert_feed_forward_length": EXPERT_FFN,
}
F16_GB = 11.2  # what the F16 intermediate takes on disk
NEEDED_GB = F16_GB + 3.5  # with the Q4_K_M beside it while llama-quantize runs


def tensors() -> Iterator[tuple[str, tuple[int, ...], type]]:
    """(name, numpy shape, dtype) of every tensor, in the file's order: the names llama.cpp's
    `llama_model_qwen3moe::load_arch_tensors` asks for (src/models/qwen3moe.cpp)."""
    yield "token_embd.weight", (VOCAB, HIDDEN), np.float16
    for i in range(LAYERS):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (HIDDEN,), np.float32
        yield b + "attn_q.weight", (HEADS * HEAD_DIM, HIDDEN), np.float16
        yield b + "attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), np.float16
        yield b + "attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), np.float16
        yield b + "attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), np.float16
        yield b + "attn_q_norm.weight", (HEAD_DIM,), np.float32
        yield b + "attn_k_norm.weight", (HEAD_DIM,), np.float32
        yield b + "ffn_norm.weight", (HIDDEN,), np.float32
        yield b + "ffn_gate_inp.weight", (EXPERTS, HIDDEN), np.float32  # the router, F32 as the converter writes it
        yield b + "ffn_gate_exps.weight", (EXPERTS, EXPERT_FFN, HIDDEN), np.float16
        yield b + "ffn_up_exps.weight", (EXPERTS, EXPERT_FFN, HIDDEN), np.float16
        yield b + "ffn_down_exps.weight", (EXPERTS, HIDDEN, EXPERT_FFN), np.float16
    yield "output_norm.weight", (HIDDEN,), np.float32
    yield "output.weight", (VOCAB, HIDDEN), np.float16  # untied, as Qwen3-30B-A3B's


def values(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Norms are ones; every other weight (the router's too) normal with std 0.02."""
    if name.endswith("norm.weight"):
        return np.ones(shape, dtype=dtype)
    out = rng.standard_normal(shape, dtype=np.float32)
    out *= 0.02
    return out.astype(dtype, copy=False)


def write_f16(path: Path, seed: int = 0, progress: Callable[[str], None] | None = None) -> None:
    writer = tokenizer_writer(path, "qwen3moe", f"Qwen3-30B-A3B shape ({LAYERS} layers), random weights")
    for key, value in SHAPE.items():
        writer.add_uint32(f"qwen3moe.{key}", value)
    writer.add_float32("qwen3moe.rope.freq_base", 1000000.0)
    writer.add_float32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6)
    for name, shape, dtype in tensors():
        writer.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, dtype in tensors():  # one tensor in memory at a time
        writer.write_tensor_data(values(rng, name, shape, dtype))
        if progress and name.endswith("ffn_down_exps.weight"):
            progress(int(name.split(".")[1]) + 1)
    writer.close()


def shaped_moe(kind: str = "Q4_K_M") -> Path:
    """The quantized file, made the first time (the F16 intermediate is deleted after)."""
    out = MODELS / f"{NAME}-{kind}.gguf"
    if not out.is_file():
        MODELS.mkdir(parents=True, exist_ok=True)
        free_gb = shutil.disk_usage(MODELS).free / 1e9
        if free_gb < NEEDED_GB:
            raise SystemExit(
                f"{MODELS} has {free_gb:.1f} GB free; the F16 intermediate and the {kind} file need ~{NEEDED_GB:.0f} GB"
            )
        layer = lambda i: print(f"  layer {i} of {LAYERS} written", flush=True)  # noqa: E731
        quantized(NAME, lambda path: write_f16(path, progress=layer), kind, f"~{F16_GB:.0f} GB")
    return out


if __name__ == "__main__":
    path = shaped_moe(*sys.argv[1:2])
    print(f"{path} ({path.stat().st_size / 1e9:.2f} GB)")
