"""The GGUF's cached config and tokenizer are what transformers makes of the file, read back
without transformers' config classes and AutoTokenizer (their imports cost ~100 MB resident)."""

from __future__ import annotations

import json
import os

import pytest

from inference.engine.gguf import checkpoint as gguf_checkpoint
from inference.engine.loader import embedded_model_source
from tests.support.gguf_files import write_block_gguf

pytestmark = pytest.mark.real_model  # the embedded GGUF, read and served

TEXTS = [
    "The capital of France is",
    "  leading spaces, tabs\tand\nnew lines  ",
    "<|im_start|>user\nhi<|im_end|> special tokens inside text",
    "unicode: café, naïve, 日本語, emoji 🙂, math ∑",
    "",
    "def f(a):\n    return a + 1\n",  # a Qwen2 split regex takes the newline and indent apart
]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """(transformers' config and tokenizer of the embedded GGUF, the checkpoint as a fresh cache gives it back)."""
    from transformers import AutoConfig

    source = embedded_model_source()
    path = os.path.join(source.path, source.gguf_file)
    original = gguf_checkpoint.CACHE_ROOT
    gguf_checkpoint.CACHE_ROOT = tmp_path_factory.mktemp("gguf-cache")
    try:
        assert gguf_checkpoint.GGUFCheckpoint.open(path).tokenizer is not None  # parses, then writes the cache
        assert (gguf_checkpoint.cache_dir(path) / "index.json").is_file()
        cached = gguf_checkpoint.GGUFCheckpoint.open(path)  # reads it back
        assert cached.tokenizer is not None
    finally:
        gguf_checkpoint.CACHE_ROOT = original
    return AutoConfig.from_pretrained(source.path, gguf_file=source.gguf_file), cached


def test_the_cached_config_holds_every_field_of_transformers_config(embedded):
    config, cached = embedded
    assert isinstance(cached.hf_config, gguf_checkpoint.SavedConfig)
    for key, value in config.to_dict().items():
        if key in ("transformers_version", "dtype", "torch_dtype"):
            continue
        assert getattr(cached.hf_config, key) == json.loads(json.dumps(value)), key  # JSON's keys are strings
    assert cached.hf_config.model_type == "llama" and cached.hf_config.num_hidden_layers == 30


def test_the_cached_tokenizer_encodes_decodes_and_renders_chats_as_transformers_does(embedded, smollm_tokenizer):
    assert_same_tokenizer(embedded[1].tokenizer, smollm_tokenizer)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_a_qwen_files_cached_tokenizer_is_the_ggufs_own(tmp_path, monkeypatch, arch):
    """transformers names Qwen2Tokenizer for these files, whose constructor puts Qwen2's own pre-tokenizer
    over the file's: read back through it, code split differently from the GGUF's tokenizer."""
    from transformers import AutoTokenizer

    monkeypatch.setattr(gguf_checkpoint, "CACHE_ROOT", tmp_path / "cache")
    path = write_block_gguf(tmp_path / "m.gguf", arch)
    assert gguf_checkpoint.GGUFCheckpoint.open(path).tokenizer is not None  # parses, then writes the cache
    cached = gguf_checkpoint.GGUFCheckpoint.open(path)  # reads it back
    assert_same_tokenizer(cached.tokenizer, AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf"))


def assert_same_tokenizer(tokenizer, reference):
    for text in TEXTS:
        ids = reference(text).input_ids
        assert tokenizer(text).input_ids == ids, text
        assert tokenizer.decode(ids) == reference.decode(ids)
        assert tokenizer.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True)
    for generation_prompt in (True, False) if reference.chat_template else ():  # a base model has none
        assert tokenizer.apply_chat_template(
            MESSAGES, tokenize=False, add_generation_prompt=generation_prompt
        ) == reference.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=generation_prompt)
    for attribute in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id", "all_special_ids"):
        assert getattr(tokenizer, attribute) == getattr(reference, attribute), attribute
    assert len(tokenizer) == len(reference)
    assert tokenizer.convert_ids_to_tokens(list(range(0, 49152, 997))) == reference.convert_ids_to_tokens(
        list(range(0, 49152, 997))
    )


@pytest.mark.parametrize("name", ["GEMMA3", "QWEN25_CODER"])
def test_a_real_files_cached_tokenizer_reads_as_from_pretrained_reads_it(name):
    """The cache is read straight from tokenizer.json (not `from_pretrained`, which also parses the
    whole pipeline in Python): the same tokenizer, special and added tokens, chat template and all."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    from tests.support import real_gguf

    path = str(getattr(real_gguf, name).file_or_skip())
    tokenizer = gguf_checkpoint.GGUFCheckpoint.open(path).tokenizer
    reference = TokenizersBackend.from_pretrained(gguf_checkpoint.cache_dir(path))
    assert_same_tokenizer(tokenizer, reference)
    assert tokenizer.chat_template == reference.chat_template
    assert {i: (t.content, t.special) for i, t in tokenizer.added_tokens_decoder.items()} == {
        i: (t.content, t.special) for i, t in reference.added_tokens_decoder.items()
    }
