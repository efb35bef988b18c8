"""A GGUF's config rebuilt from the fast metadata reader is exactly the config transformers' legacy
gguf-py parse gives, for every family we serve, and the fast path is lent to transformers only
inside the block that asks for it."""

from __future__ import annotations

import os

import pytest

from inference.engine.gguf.config import SERVED_ARCHITECTURES, config_dict, fast_gguf_config
from inference.engine.loader import embedded_model_source
from tests.support.gguf_files import write_block_gguf

pytestmark = pytest.mark.real_model  # the embedded GGUF's tokenizer fields, in every file written here


def legacy_config(path: str) -> dict:
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    return load_gguf_checkpoint(path, return_tensors=False)["config"]


def fast_config(path: str) -> dict:
    from transformers.integrations.gguf import read_gguf_metadata

    return config_dict(*read_gguf_metadata(path))


@pytest.mark.parametrize(
    "arch, options",
    [
        ("llama", {}),
        ("llama", {"tied": False, "rope_freqs": True}),
        ("qwen2", {}),
        ("qwen3", {"tied": False}),
        ("gemma3", {}),
        ("phi3", {}),
    ],
    ids=["llama-tied", "llama3-untied", "qwen2", "qwen3-untied", "gemma3", "phi3"],
)
def test_the_config_equals_the_legacy_parse(tmp_path, arch, options):
    path = write_block_gguf(tmp_path / "m.gguf", arch, **options)
    fast = fast_config(path)
    assert fast["tie_word_embeddings"] is options.get("tied", True)
    # what llama.cpp reads beside the keys transformers maps, which the legacy parse leaves out
    if arch == "gemma3":  # the query scale
        assert fast.pop("query_pre_attn_scalar") == 256 and fast["model_type"] == "gemma3_text"
    elif arch == "phi3":  # the rotary width and LongRoPE's fields (its factors are tensors)
        assert (fast.pop("partial_rotary_factor"), fast.pop("original_max_position_embeddings")) == (0.75, 128)
        assert fast.pop("gguf_longrope") == {"original_max_position_embeddings": 128, "attention_factor": pytest.approx(1.19)}
    else:
        assert fast["model_type"] == arch
    assert fast == legacy_config(path)


def test_a_smollm3_file_transformers_cannot_read_gets_llamas_keys_and_its_rope_step(tmp_path):
    fast = fast_config(write_block_gguf(tmp_path / "m.gguf", "smollm3"))
    assert fast["model_type"] == "smollm3" and fast["no_rope_layer_interval"] == 4
    assert (fast["num_hidden_layers"], fast["hidden_size"], fast["num_key_value_heads"]) == (4, 256, 2)


def test_the_embedded_models_config_equals_the_legacy_parse():
    source = embedded_model_source()
    path = os.path.join(source.path, source.gguf_file)
    assert fast_config(path) == legacy_config(path)


def test_transformers_takes_the_fast_path_only_inside_the_block(tmp_path):
    from transformers import AutoConfig
    from transformers.integrations.gguf import GGUF_CONFIG_ARCHS

    write_block_gguf(tmp_path / "m.gguf", "qwen2")
    with fast_gguf_config("qwen2"):
        assert "qwen2" in GGUF_CONFIG_ARCHS
        inside = AutoConfig.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    assert not set(SERVED_ARCHITECTURES) & set(GGUF_CONFIG_ARCHS)
    outside = AutoConfig.from_pretrained(str(tmp_path), gguf_file="m.gguf")  # the legacy parse
    assert inside.to_dict() == outside.to_dict()
    with fast_gguf_config("falcon"):  # not ours to serve: transformers keeps its own reading
        assert "falcon" not in GGUF_CONFIG_ARCHS


def test_a_llama_file_named_mistral_is_mistral_without_a_window(tmp_path):
    """As the legacy reader, a "llama" file whose name is "mistral" is Mistral; as llama.cpp, it has
    no sliding window unless the file states one (MistralConfig's own default is 4,096)."""
    from transformers.integrations.gguf import read_gguf_metadata

    metadata, names = read_gguf_metadata(write_block_gguf(tmp_path / "m.gguf", "llama"))
    metadata["general.name"] = "mistral"
    config = config_dict(metadata, names)
    assert config["model_type"] == "mistral" and config["sliding_window"] is None
    config = config_dict({**metadata, "llama.attention.sliding_window": 4096}, names)
    assert config["sliding_window"] == 4096


def test_a_qwen3moe_file_equals_the_legacy_parse_plus_what_llama_cpp_reads(tmp_path):
    """transformers maps the expert counts; the experts' width and every layer being sparse are
    what llama.cpp reads beside them."""
    path = write_block_gguf(tmp_path / "m.gguf", "qwen3moe")
    fast = fast_config(path)
    assert fast.pop("moe_intermediate_size") == 256
    assert (fast.pop("decoder_sparse_step"), fast.pop("mlp_only_layers")) == (1, [])
    assert fast["model_type"] == "qwen3_moe" and (fast["num_experts"], fast["num_experts_per_tok"]) == (8, 2)
    assert fast == legacy_config(path)


@pytest.mark.parametrize("arch, model_type", [("mixtral", "mixtral"), ("olmoe", "olmoe")])
def test_moe_files_transformers_cannot_read_get_their_family_and_experts(tmp_path, arch, model_type):
    """A `llama` file with experts is Mixtral (llama.cpp writes Mixtral so); OLMoE reads Llama's
    keys; Mixtral renormalises its chosen experts, OLMoE does not."""
    fast = fast_config(write_block_gguf(tmp_path / "m.gguf", arch))
    experts = fast["num_local_experts"] if arch == "mixtral" else fast["num_experts"]
    assert fast["model_type"] == model_type and (experts, fast["num_experts_per_tok"], fast["intermediate_size"]) == (8, 2, 256)
    assert fast.get("norm_topk_prob") is (None if arch == "mixtral" else False)


def test_a_gemma4_config_reads_llama_cpps_own_keys():
    """What llama.cpp writes of Gemma 4 beside transformers' keys (the layer types as a pattern, the
    sliding layers' head width, per-type KV heads and per-layer MLP widths as arrays, KV sharing,
    per-layer inputs, soft-capping, experts), and K-as-V read off a full layer without `attn_v`."""
    from transformers import Gemma4TextConfig

    metadata = {
        "general.architecture": "gemma4",
        "gemma4.block_count": 4,
        "gemma4.context_length": 4096,
        "gemma4.embedding_length": 64,
        "gemma4.feed_forward_length": [128, 128, 256, 256],
        "gemma4.attention.head_count": 4,
        "gemma4.attention.head_count_kv": [2, 1, 2, 1],
        "gemma4.attention.key_length": 32,
        "gemma4.attention.key_length_swa": 16,
        "gemma4.attention.layer_norm_rms_epsilon": 1e-6,
        "gemma4.attention.sliding_window": 512,
        "gemma4.attention.sliding_window_pattern": [True, False, True, False],
        "gemma4.attention.shared_kv_layers": 2,
        "gemma4.embedding_length_per_layer_input": 8,
        "gemma4.final_logit_softcapping": 30.0,
        "gemma4.rope.freq_base": 1e6,
        "gemma4.rope.freq_base_swa": 1e4,
        "gemma4.expert_count": 4,
        "gemma4.expert_used_count": 2,
        "gemma4.expert_feed_forward_length": 32,
        "tokenizer.ggml.tokens": 1000,
    }
    names = ("token_embd.weight", "blk.0.attn_v.weight", "blk.1.attn_k.weight")  # layer 1 (full): no attn_v
    config = Gemma4TextConfig(**{k: v for k, v in config_dict(metadata, names).items() if k != "model_type"})
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2 and config.num_kv_shared_layers == 2
    assert [(c.num_key_value_heads, c.head_dim) for c in config.per_layer_config] == [(2, 16), (1, 32)] * 2
    assert config.attention_k_eq_v and config.use_double_wide_mlp and config.intermediate_size == 128
    assert (config.hidden_size_per_layer_input, config.final_logit_softcapping, config.vocab_size) == (8, 30.0, 1000)
    assert (config.num_experts, config.top_k_experts, config.moe_intermediate_size) == (4, 2, 32)
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
