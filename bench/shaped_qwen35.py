"""A Qwen3.5 model of a real shape for the benchmark: Qwen3.5-2B's text model (24 layers of 2048,
three Gated DeltaNet layers then one gated full-attention layer, repeated; 16 key / 16 value heads of
128 in the linear layers, 8 query heads over 2 KV heads of 256 in the attention layers, rotary on a
quarter of each head; a 6144-wide MLP; a tied 248,320-token embedding) with random weights, as
llama.cpp lays it out (`qwen35`) and quantized by llama.cpp's own `llama-quantize` to Q4_K_M.

The file is llama.cpp's own conversion, not one written with gguf-py: a hybrid's layout (V heads
re-tiled, `ssm_a` = -exp(A_log), zero-centred norms + 1, ...) is the converter's to say
(tests/support/llama_convert.py). So the weights go through an HF folder: transformers'
`Qwen3_5ForCausalLM` built without its random initialisation (inference/engine/models/no_init.py)
in bfloat16, filled with normal values of std 0.02 (the norms, dt_bias and A_log as the constructor
sets them, A_log kept away from log(0)), saved with safetensors beside the embedded SmolLM2's
tokenizer, converted to F16 by `convert_hf_to_gguf.py --no-mtp`, then quantized. The tokenizer has
49,152 tokens; the converter pads the vocabulary to the config's 248,320 with unused `[PAD<i>]`
tokens, so the embedding and the output layer cost what Qwen3.5's do. Speed does not depend on the
weights' values.

The HF folder (~3.8 GB) and the F16 file (~3.8 GB) are deleted once the Q4_K_M file (~1.3 GB) is made.

    python -m bench.shaped_qwen35           # prints the Q4_K_M file's path and size (built once, ~5-10 min on 2 cores)
"""

from __future__ import annotations

import sys
from pathlib import Path

from .shaped_model import MODELS, converted_and_quantized, random_hf_model

NAME = "qwen3.5-2b-shape-random"
LAYERS = 24
FULL_ATTENTION_EVERY = 4  # layers 3, 7, ..., 23: full attention; the others Gated DeltaNet
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 256
TEXT_CONFIG = dict(  # Qwen3.5-2B's text_config
    vocab_size=248320,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=LAYERS,
    layer_types=["full_attention" if (i + 1) % FULL_ATTENTION_EVERY == 0 else "linear_attention" for i in range(LAYERS)],
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    head_dim=HEAD_DIM,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    tie_word_embeddings=True,
    rope_parameters=dict(
        rope_type="default",
        rope_theta=10_000_000.0,
        partial_rotary_factor=0.25,
        mrope_section=[11, 11, 10],  # 32 rotated pairs of the 64 rotated dims; text positions: plain rope
        mrope_interleaved=True,
    ),
    max_position_embeddings=262144,
    rms_norm_eps=1e-6,
    bos_token_id=1,  # the embedded SmolLM2 tokenizer's <|im_start|> / <|im_end|>
    eos_token_id=2,
)
FULL_ATTENTION_LAYERS = sum(t == "full_attention" for t in TEXT_CONFIG["layer_types"])
NEEDED_GB = 3.8 + 3.8 + 1.3  # the HF folder, the F16 file and the Q4_K_M beside them


def write_hf_folder(folder: Path, seed: int = 0) -> Path:
    """The random model and the embedded tokenizer, saved at `folder` (safetensors, bfloat16)."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from .model_files import load_tokenizer

    model, generator = random_hf_model(Qwen3_5ForCausalLM, Qwen3_5TextConfig(**TEXT_CONFIG), seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("A_log"):  # the constructor draws A from [0, 16): log(0) would be -inf
                parameter.copy_(torch.empty(parameter.shape).uniform_(1.0, 16.0, generator=generator).log_())
    model.save_pretrained(folder)
    load_tokenizer().save_pretrained(folder)
    return folder


def shaped_qwen35(kind: str = "Q4_K_M") -> Path:
    """The quantized file, made the first time (the HF folder and the F16 file are deleted after)."""
    out = MODELS / f"{NAME}-{kind}.gguf"
    return converted_and_quantized(out, write_hf_folder, kind, NEEDED_GB, convert_args=("--no-mtp",))


if __name__ == "__main__":
    path = shaped_qwen35(*sys.argv[1:2])
    print(f"{path} ({path.stat().st_size / 1e9:.2f} GB)")
