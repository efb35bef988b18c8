"""EngineConfig: every engine knob, with defaults that run well on a 2-core CPU."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

import torch

from .env import env_bool, env_float, env_int, env_str
from .spec_decode.proposer import SPEC_MODES

QUANT_METHODS = ("auto", "none", "gguf", "int4", "q8_0", "int8", "bf16")  # layers/linear/__init__.py


CPU_ISAS = ("auto", "avx2", "avx512bw", "avx512_vnni", "amx")  # kernels/common/cpu_isa.cpp, the best last
KV_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16")

DEFAULT_SLOTS_CPU = 32
DEFAULT_SLOTS_CUDA = 128


def _lower(name: str, default: str, environ) -> str:
    return env_str(name, default, environ).lower()


def _knob(default, env: str, read=env_str):
    """A field's default, written once, and the MINIVLLM_* variable that sets it (`from_env`,
    through `read`: env_str, env_int, env_float, env_bool or _lower)."""
    return field(default=default, metadata={"env": env, "read": read})


@dataclass
class EngineConfig:
    model: str | None = _knob(None, "MINIVLLM_MODEL")  # None: the embedded SmolLM2-135M-Instruct GGUF
    dtype: str = _knob("auto", "MINIVLLM_DTYPE")  # auto | float32 | bfloat16 | float16
    device: str = _knob("auto", "MINIVLLM_DEVICE")  # auto | cpu | cuda
    block_size: int = _knob(16, "MINIVLLM_BLOCK_SIZE", env_int)
    # KV pool size on CPU; None: planned from available memory (kv_cache/memory_plan.py)
    kv_cache_mb: int | None = _knob(None, "MINIVLLM_KV_CACHE_MB", env_int)
    # CPU: this engine's share of the planned KV budget where several models share the process
    # (serving/models/memory_budget.py sets it; 1.0 alone); one full context is kept regardless
    kv_share: float = 1.0
    # CUDA: this engine's share of the GPU's total memory, weights and KV pool together (kv_cache/memory_plan.py)
    gpu_memory_utilization: float = _knob(0.9, "MINIVLLM_GPU_MEMORY_UTILIZATION", env_float)
    # batch slots; None: DEFAULT_SLOTS_CPU on CPU, DEFAULT_SLOTS_CUDA on CUDA (slots_for)
    max_num_seqs: int | None = _knob(None, "MINIVLLM_MAX_NUM_SEQS", env_int)
    max_num_batched_tokens: int = _knob(512, "MINIVLLM_MAX_NUM_BATCHED_TOKENS", env_int)
    max_model_len: int | None = _knob(None, "MINIVLLM_MAX_MODEL_LEN", env_int)  # None: the model's own context length
    enable_prefix_caching: bool = _knob(True, "MINIVLLM_PREFIX_CACHING", env_bool)
    # auto | none | gguf | int4 | q8_0 | int8 | bf16 (layers/linear/__init__.py)
    quantization: str = _knob("auto", "MINIVLLM_QUANT")
    # exact pool size, overriding the memory-based plan (tests, tuning)
    num_kv_blocks: int | None = _knob(None, "MINIVLLM_NUM_KV_BLOCKS", env_int)
    kv_cache_dtype: str = _knob("auto", "MINIVLLM_KV_CACHE_DTYPE")  # auto (kv_dtype_for) | float32 | float16 | bfloat16
    # caps the kernels' instruction set: auto | avx2 | avx512bw | avx512_vnni | amx (the loader applies it)
    cpu_isa: str = _knob("auto", "MINIVLLM_CPU_ISA")
    # a GGUF's packed weights kept on disk at its first start, mapped by later ones (gguf/packed_cache.py)
    packed_cache: bool = _knob(True, "MINIVLLM_PACKED_CACHE", env_bool)
    pooling: str = _knob(
        "auto", "MINIVLLM_POOLING"
    )  # embeddings: auto (the checkpoint's) | last | mean | cls (layers/pooling.py)
    # auto (adaptive) | off | ngram (always guess): spec_decode/proposer.py
    speculative: str = _knob("auto", "MINIVLLM_SPECULATIVE", _lower)
    spec_tokens: int = _knob(8, "MINIVLLM_SPEC_TOKENS", env_int)  # the most tokens a sequence guesses per step
    # the shortest and longest suffix the n-gram lookup matches
    spec_ngram_min: int = _knob(2, "MINIVLLM_SPEC_NGRAM_MIN", env_int)
    spec_ngram_max: int = _knob(4, "MINIVLLM_SPEC_NGRAM_MAX", env_int)
    # auto (decode steps replayed from CUDA graphs on a GPU) | off: runner/decode_graphs.py
    cuda_graphs: str = _knob("auto", "MINIVLLM_CUDA_GRAPHS", _lower)

    def __post_init__(self):
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.pooling not in ("auto", "last", "mean", "cls"):
            raise ValueError(f"pooling must be auto, last, mean or cls, got {self.pooling!r}")
        if self.speculative not in SPEC_MODES:
            raise ValueError(f"speculative must be one of {', '.join(SPEC_MODES)}, got {self.speculative!r}")
        if self.spec_tokens < 0 or not 1 <= self.spec_ngram_min <= self.spec_ngram_max:
            raise ValueError("spec_tokens must be >= 0 and 1 <= spec_ngram_min <= spec_ngram_max")
        if self.cuda_graphs not in ("auto", "off"):
            raise ValueError(f"cuda_graphs must be auto or off, got {self.cuda_graphs!r}")
        if self.quantization not in QUANT_METHODS:
            raise ValueError(f"quantization must be one of {', '.join(QUANT_METHODS)}, got {self.quantization!r}")
        if self.cpu_isa not in CPU_ISAS:
            raise ValueError(f"cpu_isa must be one of {', '.join(CPU_ISAS)}, got {self.cpu_isa!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {self.kv_cache_dtype!r}")
        for name in ("block_size", "kv_cache_mb", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0.0 < self.kv_share <= 1.0:
            raise ValueError("kv_share must be in (0, 1]")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")

    def slots_for(self, device_type: str) -> int:
        """Batch slots: enough that 32 concurrent clients never queue on a CPU (llama-server's
        `-np 32` in the benchmark), more on a GPU, where a step of 128 costs little more than one."""
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        return DEFAULT_SLOTS_CUDA if device_type == "cuda" else DEFAULT_SLOTS_CPU

    def kv_dtype_for(self, model_dtype: torch.dtype, device_type: str, weights_format: str = "none") -> torch.dtype:
        """What the KV pool stores. Where a float32 model on CPU serves weights in a smaller format
        (int4 / q8_0 / int8 / bf16: already approximate far beyond float16's rounding), K/V are float16,
        as llama.cpp keeps them by default: half the pool's memory and half the bytes each decode step's
        attention reads (the kernels widen them as they load; docs/performance-log.md section 38).
        Float32 weights keep a float32 cache, so that mode still reproduces HF's float32 logits."""
        if self.kv_cache_dtype != "auto":
            if device_type == "cpu" and model_dtype == torch.float32 and self.kv_cache_dtype == "bfloat16":
                raise ValueError(
                    "kv_cache_dtype bfloat16 needs a bfloat16 model on CPU: the CPU kernels keep K/V in float32 or float16"
                )
            return getattr(torch, self.kv_cache_dtype)
        if device_type == "cpu" and model_dtype == torch.float32 and weights_format != "none":
            return torch.float16
        return model_dtype

    @classmethod
    def from_env(cls, environ: dict | None = None) -> EngineConfig:
        """Every MINIVLLM_* engine knob, read by the site's one parser (env.py); unset or empty: the default."""
        env = os.environ if environ is None else environ
        return cls(**{f.name: f.metadata["read"](f.metadata["env"], f.default, env) for f in fields(cls) if "env" in f.metadata})
