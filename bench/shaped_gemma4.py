"""A Gemma 4 model of a real shape for the benchmark: Gemma 4 E2B's text model (35 layers of 1536, four
sliding-window layers (512 tokens; 8 query heads over 1 KV head of 256) then one full-attention layer
(8 query heads over 1 KV head of 512, proportional RoPE on a quarter of each head), repeated; the last
20 layers share the K/V of earlier ones and have a 12288-wide MLP, the others 6144; 256-wide per-layer
inputs from a second 262,144 x 8,960 table; a tied 262,144-token embedding; logits soft-capped at 30)
with random weights, as llama.cpp lays it out (`gemma4`) and quantized by llama.cpp's own
`llama-quantize` to Q4_K_M.

The shape is google/gemma-4-E2B's `text_config` (config.json): vocab_size 262144, hidden_size 1536,
intermediate_size 6144, num_hidden_layers 35, num_attention_heads 8, num_key_value_heads 1, head_dim
256, global_head_dim 512, attention_k_eq_v false, sliding_window 512, layer_types full every 5th,
num_kv_shared_layers 20, hidden_size_per_layer_input 256, vocab_size_per_layer_input 262144,
use_double_wide_mlp true, final_logit_softcapping 30, the rope_parameters below,
max_position_embeddings 131072, tie_word_embeddings, rms_norm_eps 1e-6. The checkpoint itself was not
read here: the values are as public copies of that config.json give them (configuration test fixtures
that reproduce the E2B `text_config` whole) and agree with gemma.cpp's E2B config (google/gemma.cpp
PR #919: 35 layers of 1536, pattern 4 sliding + 1 full, FFN 6144/12288, heads 256/512, window 512,
cap 30, vocabulary 262,144), with transformers' Gemma4TextConfig defaults (its docs' checkpoint is
gemma-4-e2b-it: head_dim 256, global_head_dim 512, window 512, per-layer 256 x 262,144, the same
rope_parameters) and with docs/models.md (20 of E2B's 35 layers share KV).

The file is llama.cpp's own conversion (tests/support/llama_convert.py says why): transformers'
`Gemma4ForCausalLM` is built without its random initialisation (inference/engine/models/no_init.py)
in bfloat16, its matrices filled with normal values of std 0.02 (norms and layer scalars as the
constructor sets them: ones), saved with safetensors beside Gemma 3 270M's tokenizer (the real GGUF
`make real-gguf` fetches, tests.support.real_gguf.GEMMA3: Gemma's 262,144-token vocabulary; the
converter writes it as Gemma 4's tokenizer model), converted to F16 by `convert_hf_to_gguf.py`, then
quantized. F16, not BF16: f16 holds every bfloat16 value of this size exactly (more mantissa bits;
only values under 6e-5 lose bits, as subnormals), llama-quantize reads both alike, and the converter
widens each tensor to float32 on the way either way, but its BF16 rounding keeps a second copy of the
output (gguf-py's grouped rows are joined at the end): ~19 GB at the peak on the per-layer table
against ~14 GB for F16.

llama-quantize gives a tied model's token embeddings the output layer's type, Q6_K, and the
per-layer table counts as one of them: ~2.3 GB of the file's ~3.4 GB are those two tables. Speed
does not depend on the weights' values.

llama.cpp's KV sharing is hard-wired where HF's is not: a shared layer reads layer first_shared-2 if
it is sliding, else first_shared-1, where HF reads the last unshared layer of its type; the two agree
only where the last two unshared layers are [sliding, full] (E2B: layers 13 and 14), which
`check_kv_sharing` asserts.

The HF folder (~9.3 GB) and the F16 file (~9.3 GB) are deleted once the Q4_K_M file (~3.4 GB) is
made. Memory, one step at a time (24 GB machine): the folder is written from the model in memory
(~10 GB; safetensors writes the tensors in place, no copy), the converter holds the per-layer table
as float32 (9.4 GB) beside its F16 copy (4.7 GB): ~14 GB, llama-quantize the float32 table beside its
Q6_K blocks: ~11 GB (both also map their input file, which the kernel can drop).

    python -m bench.shaped_gemma4           # prints the Q4_K_M file's path and size (built once, ~10-20 min on 2 cores)
"""

from __future__ import annotations

import sys
from pathlib import Path

from .shaped_model import MODELS, converted_and_quantized, random_hf_model

NAME = "gemma4-e2b-shape-random"
LAYERS = 35
FULL_ATTENTION_EVERY = 5  # layers 4, 9, ..., 34: full attention; the others sliding-window
KV_SHARED_LAYERS = 20  # layers 15-34 read the K/V of layer 13 (sliding) or 14 (full)
HEADS, KV_HEADS = 8, 1
HEAD_DIM, GLOBAL_HEAD_DIM = 256, 512  # sliding layers' heads, full layers'
SLIDING_WINDOW = 512


def layer_types(layers: int, every: int = FULL_ATTENTION_EVERY) -> list[str]:
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]


TEXT_CONFIG = dict(  # google/gemma-4-E2B's text_config
    vocab_size=262144,
    hidden_size=1536,
    intermediate_size=6144,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    head_dim=HEAD_DIM,
    global_head_dim=GLOBAL_HEAD_DIM,
    attention_k_eq_v=False,
    sliding_window=SLIDING_WINDOW,
    layer_types=layer_types(LAYERS),
    num_kv_shared_layers=KV_SHARED_LAYERS,
    hidden_size_per_layer_input=256,
    vocab_size_per_layer_input=262144,
    use_double_wide_mlp=True,
    final_logit_softcapping=30.0,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
    },
    max_position_embeddings=131072,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    bos_token_id=2,  # Gemma's <bos> / <eos> / <pad>, as in Gemma 3 270M's tokenizer
    eos_token_id=1,
    pad_token_id=0,
)


def text_config(**overrides) -> dict:
    """TEXT_CONFIG with `overrides` (a smaller shape for a quick check); a new num_hidden_layers without
    layer_types gets the same every-5th pattern."""
    config = {**TEXT_CONFIG, **overrides}
    if "num_hidden_layers" in overrides and "layer_types" not in overrides:
        config["layer_types"] = layer_types(config["num_hidden_layers"])
    check_kv_sharing(config)
    return config


def check_kv_sharing(config: dict) -> None:
    """HF and llama.cpp read the same K/V in the shared layers only where the last two unshared layers
    are [sliding, full] (and, for HF, the last layer is full: its config forces it)."""
    types, shared = config["layer_types"], config["num_kv_shared_layers"]
    assert len(types) == config["num_hidden_layers"], "one layer type per layer"
    assert types[-1] == "full_attention", "Gemma 4's last layer is full attention"
    if shared:
        first = len(types) - shared
        assert first >= 2 and types[first - 2 : first] == ["sliding_attention", "full_attention"], (
            f"llama.cpp's KV sharing needs layers {first - 2} and {first - 1} to be [sliding, full], "
            f"got {types[first - 2 : first]}"
        )


def kv_layers(config: dict = TEXT_CONFIG) -> tuple[int, int]:
    """(sliding, full): how many layers keep their own K/V (the ones before the shared layers)."""
    kept = config["layer_types"][: config["num_hidden_layers"] - config["num_kv_shared_layers"]]
    return kept.count("sliding_attention"), kept.count("full_attention")


SLIDING_KV_LAYERS, FULL_KV_LAYERS = kv_layers()  # 12, 3
NEEDED_GB = 9.3 + 9.3 + 3.4  # the HF folder, the F16 file and the Q4_K_M beside them (4.63 G values)


def gemma_tokenizer():
    """Gemma 3 270M's tokenizer, from the real GGUF `make real-gguf` fetches."""
    from transformers import AutoTokenizer

    from tests.support.real_gguf import GEMMA3

    if GEMMA3.present() is None:
        raise SystemExit(f"{GEMMA3.path()} is missing: `make real-gguf` fetches it (its tokenizer is the file's)")
    return AutoTokenizer.from_pretrained(str(GEMMA3.path().parent), gguf_file=GEMMA3.name)


def write_hf_folder(folder: Path, seed: int = 0, **overrides) -> Path:
    """The random model and Gemma 3 270M's tokenizer, saved at `folder` (safetensors, bfloat16)."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    tokenizer = gemma_tokenizer()  # before the model: a missing file fails in seconds
    model, _ = random_hf_model(Gemma4ForCausalLM, Gemma4TextConfig(**text_config(**overrides)), seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build(out: Path, kind: str = "Q4_K_M", seed: int = 0, **overrides) -> Path:
    """The model (TEXT_CONFIG with `overrides`) as a `kind` file at `out`, made the first time."""
    return converted_and_quantized(out, lambda folder: write_hf_folder(folder, seed, **overrides), kind, NEEDED_GB)


def shaped_gemma4(kind: str = "Q4_K_M") -> Path:
    """The quantized file, made the first time (the HF folder and the F16 file are deleted after)."""
    return build(MODELS / f"{NAME}-{kind}.gguf", kind)


if __name__ == "__main__":
    path = shaped_gemma4(*sys.argv[1:2])
    print(f"{path} ({path.stat().st_size / 1e9:.2f} GB)")
