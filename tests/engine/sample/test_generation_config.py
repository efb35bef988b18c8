"""A checkpoint's generation_config.json gives the sampling defaults, as vLLM reads it."""

import logging

from transformers import GenerationConfig

from inference.engine.config import EngineConfig
from inference.engine.loader import load_model
from inference.engine.sample.generation_config import sampling_defaults


def test_the_file_sets_the_defaults_it_changes(tiny_llama_with_sampling_defaults_dir, tiny_llama_dir):
    assert sampling_defaults(tiny_llama_with_sampling_defaults_dir) == {"temperature": 0.3, "top_p": 0.8, "top_k": 20}
    assert sampling_defaults(tiny_llama_dir) == {}  # save_pretrained's file sets only token ids
    bundle = load_model(EngineConfig(model=tiny_llama_with_sampling_defaults_dir, device="cpu", dtype="float32"))
    assert bundle.sampling_defaults == {"temperature": 0.3, "top_p": 0.8, "top_k": 20}


def test_no_file_or_an_unusable_one_keeps_the_apis_defaults(tmp_path, caplog):
    assert sampling_defaults(str(tmp_path)) == {}
    GenerationConfig(do_sample=True, top_p=0.5, repetition_penalty=-1.0).save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="minivllm.engine"):
        assert sampling_defaults(str(tmp_path)) == {}
    assert "repetition_penalty" in caplog.text
