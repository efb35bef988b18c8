"""Session-wide model fixtures: tiny random checkpoints made in-process, and the real SmolLM2 loaded once."""

from __future__ import annotations

import os

import pytest
import torch

# Without a GPU, Triton's kernels (the CUDA decode attention) can only run in its interpreter,
# which Triton chooses when it is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from inference.engine.config import EngineConfig
from inference.engine.loader import build_bundle, embedded_model_source

# Fixtures every package may use: the in-process engines (tiny model) and the live servers.
pytest_plugins = ["tests.support.engine_fixtures", "tests.support.daphne_server", "tests.support.engines"]
REAL_MODEL_FIXTURES = {"real_hf_model", "real_bundle"}


def pytest_collection_modifyitems(items):
    """`real_model` on every test that asks for the real SmolLM2 (live modules that serve it say so themselves)."""
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_model)


TINY_COMMON = dict(vocab_size=49152, max_position_embeddings=512, bos_token_id=1, eos_token_id=2)
TINY_LLAMA_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="session")
def gemma3_reference():
    """transformers' float32 Gemma 3 270M over the real file's de-quantized weights (~10 s to
    build): the judge of our model (tests/engine/models/test_gemma3_real.py) and of both servers'
    numerics (tests/api/test_numerics_live.py)."""
    from tests.support import real_gguf
    from tests.support.gguf_reference import reference_model

    return reference_model(str(real_gguf.GEMMA3.file_or_skip()))


@pytest.fixture(scope="session")
def smollm_tokenizer():
    from transformers import AutoTokenizer

    source = embedded_model_source()
    return AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)


def _save_tiny(tmp_path_factory, tokenizer, name, hf_model):
    folder = tmp_path_factory.mktemp(name)
    hf_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _peaked(hf_model):
    """Random weights with a wide spread, so greedy choices are not near-ties that rounding could flip."""
    torch.manual_seed(0)
    with torch.no_grad():
        for param in hf_model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.08)
    return hf_model.eval()


def tiny_llama_hf(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        **TINY_LLAMA_SHAPE,
        tie_word_embeddings=False,
        **{**TINY_COMMON, **overrides},
    )
    return _peaked(LlamaForCausalLM(cfg))


def tiny_qwen2_hf():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        **TINY_LLAMA_SHAPE,
        tie_word_embeddings=True,
        **TINY_COMMON,
    )
    model = _peaked(Qwen2ForCausalLM(cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("_proj.bias"):
                param.normal_(0.0, 0.5)  # make the qkv bias matter
    return model


def tiny_qwen3_hf():
    """Qwen3's own layout: head_dim (32) apart from hidden / heads (16), per-head Q/K norms with weights
    far from 1 (so a norm skipped or misplaced changes every logit), no QKV bias."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        **TINY_LLAMA_SHAPE,
        head_dim=32,
        tie_word_embeddings=True,
        **TINY_COMMON,
    )
    model = _peaked(Qwen3ForCausalLM(cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                param.uniform_(0.5, 2.0)
    return model


def tiny_mistral_hf(sliding_window: int | None = 8):
    """Mistral v0.1's layout: Llama's layers with a sliding window over every one."""
    from transformers import MistralConfig, MistralForCausalLM

    return _peaked(MistralForCausalLM(MistralConfig(**TINY_LLAMA_SHAPE, sliding_window=sliding_window, **TINY_COMMON)))


def tiny_gemma3_hf(sliding_window: int = 8):
    """Gemma 3's layout on two sliding-window layers and a global one: a window (8) shorter than the
    prompts, a query scale apart from head_dim, different RoPE bases, and norms far from the
    `1 + 0` they start at, so each of the four norms per layer and both Q/K norms change every logit."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    shape = {**TINY_LLAMA_SHAPE, "num_hidden_layers": 3}
    cfg = Gemma3TextConfig(
        **shape,
        head_dim=32,
        query_pre_attn_scalar=24,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        **{**TINY_COMMON, "pad_token_id": 0},
    )
    model = _peaked(Gemma3ForCausalLM(cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(-0.5, 1.0)
    return model


def tiny_smollm3_hf():
    """SmolLM3's layout: four layers, the fourth without RoPE (its no_rope_layer_interval)."""
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    cfg = SmolLM3Config(**{**TINY_LLAMA_SHAPE, "num_hidden_layers": 4}, tie_word_embeddings=True, **TINY_COMMON, pad_token_id=0)
    return _peaked(SmolLM3ForCausalLM(cfg))


def tiny_phi3_hf(partial_rotary_factor: float = 0.75, **rope):
    """Phi-4-mini's layout: fused Q/K/V and gate/up, RoPE on 3/4 of each head; `rope`: LongRoPE's
    fields (factors far from 1, so the wrong set changes every logit), else plain RoPE."""
    from transformers import Phi3Config, Phi3ForCausalLM

    half = int(TINY_LLAMA_SHAPE["hidden_size"] // TINY_LLAMA_SHAPE["num_attention_heads"] * partial_rotary_factor) // 2
    scaling = {}
    if rope:
        generator = torch.Generator().manual_seed(4)
        scaling = {
            "rope_scaling": {
                "rope_type": "longrope",
                "short_factor": (1 + torch.rand(half, generator=generator)).tolist(),
                "long_factor": (4 + 8 * torch.rand(half, generator=generator)).tolist(),
            },
            "original_max_position_embeddings": rope.get("original", 128),
        }
    cfg = Phi3Config(
        **TINY_LLAMA_SHAPE,
        partial_rotary_factor=partial_rotary_factor,
        tie_word_embeddings=True,
        **{**TINY_COMMON, "pad_token_id": 0},
        **scaling,
    )
    return _peaked(Phi3ForCausalLM(cfg))


def tiny_gpt2_hf():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=49152, n_positions=512, n_embd=64, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)
    return _peaked(GPT2LMHeadModel(cfg))


@pytest.fixture(scope="session")
def tiny_hf():
    """The tiny model: a random Llama in HF's classes, built once per session (tests only read it).
    Engine tests build engines over it (tests/engine/helpers.engine_for); live servers load its
    saved copy (tiny_llama_dir)."""
    return tiny_llama_hf()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, smollm_tokenizer, tiny_hf):
    """The tiny model saved as an HF folder, for engines loaded by path."""
    return _save_tiny(tmp_path_factory, smollm_tokenizer, "tiny-llama", tiny_hf)


@pytest.fixture(scope="session")
def tiny_llama_with_sampling_defaults_dir(tmp_path_factory, smollm_tokenizer, tiny_hf):
    """The tiny model saved with a generation_config.json that sets sampling defaults."""
    from transformers import GenerationConfig

    folder = _save_tiny(tmp_path_factory, smollm_tokenizer, "tiny-llama-gen", tiny_hf)
    GenerationConfig(do_sample=True, temperature=0.3, top_p=0.8, top_k=20, bos_token_id=1, eos_token_id=2).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory, smollm_tokenizer):
    return _save_tiny(tmp_path_factory, smollm_tokenizer, "tiny-gpt2", tiny_gpt2_hf())


@pytest.fixture(scope="session")
def real_hf_model():
    """HF's own SmolLM2 in float32: the numerical reference (never used by the product)."""
    from transformers import AutoModelForCausalLM

    source = embedded_model_source()
    return AutoModelForCausalLM.from_pretrained(source.path, gguf_file=source.gguf_file, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def real_bundle(real_hf_model, smollm_tokenizer):
    """Our SmolLM2, float32, built from the reference's weights (read from the GGUF once per session)."""
    return build_bundle(
        real_hf_model.config,
        smollm_tokenizer,
        real_hf_model.state_dict(),
        name="SmolLM2-135M-Instruct.Q4_1",
        config=EngineConfig(dtype="float32", device="cpu"),
    )
