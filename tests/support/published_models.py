"""Qwen3.5 and Gemma 4 as they are published, scaled down: each size's `text_config`
(published_configs/<name>.json, its `_source` saying where it was read) with every field kept but
width and depth, saved by transformers with random weights and converted by llama.cpp's converter.

What shrinks: the hidden size (and the MLP, expert and per-layer-input widths with it), the number of
heads (the query-to-KV ratio kept, and the local-to-global K/V ratio), the number of experts (the
top k kept), and the depth to whole periods of the layer pattern (Qwen3.5: one period of three Gated
DeltaNet layers and one attention layer; Gemma 4: two periods, the second shared where the model
shares K/V). What stays: head widths (256; Gemma 4's full layers 512), the DeltaNet's 128-wide heads,
every rotary setting (Qwen3.5's interleaved multi-section RoPE, Gemma 4's proportional RoPE), the
sliding window, soft-capping, K-as-V, the double-wide MLP, tying, the context length and the
vocabulary (Gemma's own tokenizer; Qwen3.5's is not on the registry, so Qwen2.5's, whose
pre-tokenizer llama.cpp's converter knows, with its 151,936 rows).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.llama_convert import _save, convert_to_gguf

CONFIGS = Path(__file__).parent / "published_configs"
NAMES = sorted(path.stem for path in CONFIGS.glob("*.json"))
QWEN_VOCAB = 151936  # Qwen2.5's rows (its tokenizer's 151,665 tokens, padded as Qwen pads)


def published(name: str) -> dict:
    """The config as published, without its `_source` note."""
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    config.pop("_source")
    return config


def scaled(name: str, hidden: int = 64) -> dict:
    """`published(name)` shrunk in width and depth only (this module's docstring says how)."""
    c = published(name)
    c["hidden_size"] = hidden
    if c.get("intermediate_size"):
        c["intermediate_size"] = 2 * hidden
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if c.get(key):
            c[key] = hidden // 2
    if c.get("num_experts"):
        top_k = c.get("num_experts_per_tok") or c.get("top_k_experts")
        c["num_experts"] = min(c["num_experts"], 2 * top_k)
    ratio = c["num_attention_heads"] // c["num_key_value_heads"]
    local_kv = c["num_key_value_heads"]
    c["num_key_value_heads"] = min(local_kv, 2)
    c["num_attention_heads"] = ratio * c["num_key_value_heads"]
    if c.get("num_global_key_value_heads"):
        c["num_global_key_value_heads"] = max(1, c["num_key_value_heads"] * c["num_global_key_value_heads"] // local_kv)
    if c["model_type"].startswith("qwen3_5"):
        value_ratio = c["linear_num_value_heads"] // c["linear_num_key_heads"]
        c["linear_num_key_heads"], c["linear_num_value_heads"] = 2, 2 * value_ratio
        c["num_hidden_layers"] = c["full_attention_interval"]
        c["vocab_size"] = QWEN_VOCAB
        c["eos_token_id"] = 151645  # <|im_end|> of the tokenizer it is saved with
    else:
        period = c["layer_types"].index("full_attention") + 1
        c["num_hidden_layers"] = 2 * period
        if c["num_kv_shared_layers"]:  # the first period writes K/V, the second reads it
            c["num_kv_shared_layers"] = period
        if c["hidden_size_per_layer_input"]:
            c["hidden_size_per_layer_input"] = 8
    c["layer_types"] = c["layer_types"][: c["num_hidden_layers"]]
    return c


def tokenizer_for(config: dict):
    """Gemma 3 270M's tokenizer for Gemma 4, Qwen2.5-Coder 0.5B's for Qwen3.5 (the registry's real GGUFs)."""
    from inference.engine.gguf.checkpoint import GGUFCheckpoint
    from tests.support.real_gguf import GEMMA3, QWEN25_CODER

    real = GEMMA3 if config["model_type"].startswith("gemma") else QWEN25_CODER
    if real.present() is None:
        raise FileNotFoundError(f"{real.path()} is missing: `make real-gguf` fetches it")
    return GGUFCheckpoint.open(str(real.path())).tokenizer


def hf_class_and_config(config: dict):
    import transformers

    kind = {
        "qwen3_5_text": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig"),
        "qwen3_5_moe_text": ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig"),
        "gemma4_text": ("Gemma4ForCausalLM", "Gemma4TextConfig"),
    }[config["model_type"]]
    fields = {key: value for key, value in config.items() if key != "model_type"}
    return getattr(transformers, kind[0]), getattr(transformers, kind[1])(**fields)


def save_folder(name: str, path: Path, hidden: int = 64, seed: int = 0) -> Path:
    config = scaled(name, hidden)
    model_class, hf_config = hf_class_and_config(config)
    return _save(model_class, hf_config, tokenizer_for(config), path, seed, soften=_soften_attention)


def _soften_attention(model) -> None:
    """Gemma 4 does not scale its queries: its Q/K norms' learned weights do. At random weights near 1
    the scores over 256- and 512-wide heads are so sharp that float32's own rounding moves the logits
    by 1e-3 within a few hundred tokens (transformers' eager against its sdpa path, float32 against
    float64), and no comparison at 1e-4 means anything; weights of 1/sqrt(head width) give a trained
    model's softness. Weights only: the config stays as published."""
    for name, tensor in model.state_dict().items():
        if name.endswith(("q_norm.weight", "k_norm.weight")) and "gemma4" in type(model).__name__.lower():
            tensor.mul_(tensor.numel() ** -0.25)


def convert(folder: Path, out_path: Path) -> Path:
    """The converter's F32 file (Qwen3.5's MTP layer is not in the text class: `--no-mtp`)."""
    qwen = json.loads((folder / "config.json").read_text())["model_type"].startswith("qwen3_5")
    return convert_to_gguf(folder, out_path, extra_args=("--no-mtp",) if qwen else ())
