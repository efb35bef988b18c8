"""A GGUF's transformers config, built from its metadata without gguf-py's reader.

transformers 5.x reads a GGUF's config with its fast metadata reader only for the architectures in
`GGUF_CONFIG_ARCHS`; for every other one (Llama, Mistral, Qwen2, Qwen3 among them) it parses the
whole file with gguf-py's `GGUFReader`, which builds a numpy view per vocabulary string: ~10 s a
parse for a 150k-token vocabulary, and AutoConfig and AutoTokenizer each parse once. That made a
new file's first start ~25 s against llama-server's ~3.

`config_dict` is that legacy parse's config, rebuilt from the fast reader's metadata by the same
rules and transformers' own key tables (tests compare the two on every family we serve);
`fast_gguf_config` lets transformers' AutoConfig and AutoTokenizer take their fast path with it for
one file, so the tokenizer class and its conversion stay transformers' own.
"""

from __future__ import annotations

import contextlib

from ..transformers_lock import TRANSFORMERS_LOCK

SERVED_ARCHITECTURES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma3",
    "gemma4",
    "phi3",
    "smollm3",
    "qwen3moe",
    "olmoe",
)  # what our model classes run from a GGUF (a `llama` file with experts is Mixtral)
# an architecture transformers has no GGUF table for (or names otherwise), read by the one its keys follow
KEYS_AS = {"smollm3": "llama", "qwen3moe": "qwen3_moe", "olmoe": "llama"}


def config_dict(metadata: dict, tensor_names: tuple[str, ...]) -> dict:
    """The config dict transformers' legacy `load_gguf_checkpoint` gives for a file of a served
    architecture. `metadata`: transformers' `read_gguf_metadata` (string arrays left as counts)."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING
    from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING

    architecture = metadata["general.architecture"]
    name = metadata.get("general.name")
    # as the legacy reader: a "llama" file whose name is exactly "mistral" is Mistral
    updated = "mistral" if "llama" in architecture and name == "mistral" else KEYS_AS.get(architecture, architecture)
    config: dict = {"tie_word_embeddings": "output.weight" not in tensor_names}
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(updated, GGUF_CONFIG_DEFAULTS_MAPPING.get(architecture) or {}).items():
        config.setdefault(key, value)
    renames = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    for gguf_key, value in metadata.items():
        prefix, _, config_key = gguf_key.replace(architecture, updated).partition(".")
        if isinstance(value, list) and len(value) == 1:  # the legacy reader unwraps one-element arrays
            value = value[0]
        if isinstance(value, str) and architecture in value:
            value = value.replace(architecture, updated)
        renamed = renames.get(prefix, {}).get(config_key, -1)
        if renamed not in (-1, None):
            config[renamed] = value
    if "vocab_size" not in config and isinstance(metadata.get("tokenizer.ggml.tokens"), int):
        config["vocab_size"] = metadata["tokenizer.ggml.tokens"]  # the fast reader counts the strings
    if updated == "mistral":  # llama.cpp applies no window to a llama file; MistralConfig would default to 4,096
        config["sliding_window"] = metadata.get(f"{architecture}.attention.sliding_window")
    if architecture == "gemma3":
        _gemma3_fields(config, metadata)
    elif architecture == "gemma4":
        _gemma4_fields(config, metadata, tensor_names)
    elif architecture == "phi3":
        _phi3_fields(config, metadata, tensor_names)
    elif architecture == "smollm3":
        config["model_type"] = "smollm3"
        config["no_rope_layer_interval"] = 4  # llama.cpp's fixed step: no RoPE on every fourth layer
    if metadata.get(f"{architecture}.expert_count"):
        _expert_fields(config, metadata, architecture)
    return config


def _expert_fields(config: dict, metadata: dict, architecture: str) -> None:
    """A mixture of experts: how many experts, how many a token takes, their width, and whether
    the chosen k are renormalised, as llama.cpp runs each architecture (every layer sparse).
    A `llama` file with experts is Mixtral (llama.cpp's converter writes Mixtral as `llama`)."""
    model_type = {"llama": "mixtral", "qwen3moe": "qwen3_moe", "olmoe": "olmoe"}.get(architecture)
    if model_type is None:
        return
    config["model_type"] = model_type
    experts, used = metadata[f"{architecture}.expert_count"], metadata[f"{architecture}.expert_used_count"]
    config["num_local_experts" if model_type == "mixtral" else "num_experts"] = experts
    config["num_experts_per_tok"] = used
    width = metadata.get(f"{architecture}.expert_feed_forward_length")
    if model_type == "qwen3_moe":
        config["moe_intermediate_size"] = width or config.get("intermediate_size")
        config["norm_topk_prob"] = True
        config["decoder_sparse_step"], config["mlp_only_layers"] = 1, []
    elif width:
        config["intermediate_size"] = width
    if model_type == "olmoe":
        config["norm_topk_prob"] = False


def _phi3_fields(config: dict, metadata: dict, tensor_names: tuple[str, ...]) -> None:
    """What llama.cpp's converter writes of Phi-3's config beside transformers' keys: the rotary
    width (Phi-4-mini turns 3/4 of each head), the sliding window, and LongRoPE's original context
    and attention factor, whose per-frequency factors are the file's `rope_factors_*` tensors
    (the model reads them at load; `gguf_longrope` says they are there)."""
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    rotary = metadata.get("phi3.rope.dimension_count")
    if rotary:
        config["partial_rotary_factor"] = rotary / head_dim
    if metadata.get("phi3.attention.sliding_window"):
        config["sliding_window"] = metadata["phi3.attention.sliding_window"]
    original = metadata.get("phi3.rope.scaling.original_context_length")
    if original:
        config["original_max_position_embeddings"] = original
    if "rope_factors_long.weight" in tensor_names:
        config["gguf_longrope"] = {
            "original_max_position_embeddings": original or config["max_position_embeddings"],
            "attention_factor": metadata.get("phi3.rope.scaling.attn_factor"),
        }


def _gemma3_fields(config: dict, metadata: dict) -> None:
    """What the legacy reader renames (the file holds the text model only: `gemma3_text`) and what
    llama.cpp reads beside its keys: the query scale, 1/√head_dim except on the 27B (62 layers),
    which scales by 1/√(hidden / heads); and the global layers' linear RoPE scaling (4B and up)."""
    config["model_type"] = "gemma3_text"
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    config["query_pre_attn_scalar"] = (
        config["hidden_size"] // config["num_attention_heads"] if config["num_hidden_layers"] == 62 else head_dim
    )
    if metadata.get("gemma3.rope.scaling.type") == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(metadata["gemma3.rope.scaling.factor"])}


def _gemma4_fields(config: dict, metadata: dict, tensor_names: tuple[str, ...]) -> None:
    """Gemma 4 as llama.cpp's converter writes it, which transformers' tables read only in part:
    the layer types (`sliding_window_pattern`), the sliding layers' head width beside the full
    layers' (`key_length_swa` / `key_length`), per-type K/V heads and per-layer MLP widths where
    they are arrays, the KV-shared layers, the per-layer inputs, soft-capping, the experts. The full
    layers' proportional RoPE comes as the file's `rope_freqs` (its unturned frequencies divided by
    1e30), applied to the model's full-layer rotary at load; `attention_k_eq_v` is a full layer without `attn_v`."""
    key = lambda name, default=None: metadata.get(f"gemma4.{name}", default)  # noqa: E731
    swa = [bool(x) for x in key("attention.sliding_window_pattern")]
    layer_types = ["sliding_attention" if s else "full_attention" for s in swa]
    first_full = layer_types.index("full_attention")
    heads_kv, widths = key("attention.head_count_kv"), key("feed_forward_length")
    heads_kv = heads_kv if isinstance(heads_kv, list) else [heads_kv] * len(swa)
    widths = widths if isinstance(widths, list) else [widths] * len(swa)
    config.update(
        model_type="gemma4_text",
        layer_types=layer_types,
        head_dim=key("attention.key_length_swa"),
        global_head_dim=key("attention.key_length"),
        num_key_value_heads=heads_kv[swa.index(True)] if True in swa else heads_kv[0],
        attention_k_eq_v=f"blk.{first_full}.attn_v.weight" not in tensor_names,
        intermediate_size=widths[0],
        use_double_wide_mlp=len(set(widths)) > 1,
        num_kv_shared_layers=key("attention.shared_kv_layers", 0),
        hidden_size_per_layer_input=key("embedding_length_per_layer_input", 0),
        final_logit_softcapping=key("final_logit_softcapping"),
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": key("rope.freq_base_swa", 10_000.0)},
            "full_attention": {"rope_type": "default", "rope_theta": key("rope.freq_base", 1_000_000.0)},
        },
        eos_token_id=[1, 106, 50],  # as transformers' reader: <eos>, <turn|> and <|tool_response> end a turn
    )
    config["vocab_size_per_layer_input"] = config["vocab_size"]
    if config["attention_k_eq_v"]:
        config["num_global_key_value_heads"] = heads_kv[first_full]
    if key("expert_count"):
        config.update(
            enable_moe_block=True,
            num_experts=key("expert_count"),
            top_k_experts=key("expert_used_count"),
            moe_intermediate_size=key("expert_feed_forward_length"),
        )


@contextlib.contextmanager
def fast_gguf_config(architecture: str):
    """For the block's duration, transformers reads configs of `architecture` through `config_dict`
    (its fast path), where it would parse the whole file with gguf-py. Architectures we do not
    serve keep transformers' own reading (and its errors). Holds the transformers lock throughout:
    the registry is transformers' process-wide state, and the block calls into transformers."""
    with TRANSFORMERS_LOCK:
        from transformers.integrations import gguf

        registry = gguf.GGUF_CONFIG_ARCHS
        added = architecture in SERVED_ARCHITECTURES and architecture not in registry
        if added:
            registry[architecture] = config_dict
        try:
            yield
        finally:
            if added:
                registry.pop(architecture, None)
