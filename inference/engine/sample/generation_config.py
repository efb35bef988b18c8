"""A checkpoint's own sampling defaults: what its generation_config.json sets (HF folders and hub ids).

As vLLM does, only the values the file sets differently from transformers' defaults count, and
only the sampling ones; they become the defaults of requests that leave those fields out. GGUF
files carry no generation config, so a GGUF model keeps the API's defaults.
"""

from __future__ import annotations

import logging

from ..transformers_lock import TRANSFORMERS_LOCK
from .sampling_params import SamplingParams, SamplingParamsError

log = logging.getLogger("minivllm.engine")

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def sampling_defaults(path: str) -> dict:
    """{field: value} from the checkpoint's generation_config.json, or {} when it has none."""
    try:
        with TRANSFORMERS_LOCK:
            from transformers import GenerationConfig

            config = GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):
        return {}
    diff = config.to_diff_dict()
    defaults = {name: diff[name] for name in SAMPLING_FIELDS if diff.get(name) is not None}
    try:
        SamplingParams(**defaults)
    except SamplingParamsError as exc:  # a default no request could use: keep the API's own
        log.warning("ignoring the checkpoint's sampling defaults %s: %s", defaults, exc.message)
        return {}
    if defaults:
        log.info("sampling defaults from the checkpoint's generation_config.json: %s", defaults)
    return defaults
