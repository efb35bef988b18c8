"""EngineConfig: every engine knob, with defaults that run well on a 2-core CPU."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .env import env_bool, env_float, env_int, env_str
from .spec_decode.proposer import SPEC_MODES

QUANT_METHODS = ("auto", "none", "gguf", "int4", "q8_0", "int8", "bf16")  # layers/linear/__init__.py


CPU_ISAS = ("auto", "avx2", "avx512bw", "avx512_vnni", "amx")  # kernels/common/cpu_isa.cpp, the best last
KV_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16")

DEFAULT_SLOTS_CPU = 32
DEFAULT_SLOTS_CUDA = 128


@dataclass
class EngineConfig:
    model: str | None = None  # None: the embedded SmolLM2-135M-Instruct GGUF
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    device: str = "auto"  # auto | cpu | cuda
    block_size: int = 16
    kv_cache_mb: int | None = None  # KV pool size on CPU; None: planned from available memory (kv_pool.py)
    gpu_memory_utilization: float = (
        0.9  # CUDA: this engine's share of the GPU's total memory, weights and KV pool together (kv_pool.py)
    )
    max_num_seqs: int | None = None  # batch slots; None: 32 on CPU, 128 on CUDA (slots_for)
    max_num_batched_tokens: int = 512
    max_model_len: int | None = None  # None: the model's own context length
    enable_prefix_caching: bool = True
    quantization: str = "auto"  # auto | none | gguf | int4 | q8_0 | int8 | bf16 (layers/linear/__init__.py)
    num_kv_blocks: int | None = None  # exact pool size, overriding the memory-based plan (tests, tuning)
    kv_cache_dtype: str = "auto"  # auto (kv_dtype_for) | float32 | float16 | bfloat16
    cpu_isa: str = "auto"  # caps the kernels' instruction set: auto | avx2 | avx512bw | avx512_vnni | amx (the loader applies it)
    packed_cache: bool = (
        True  # a GGUF's packed weights kept on disk at its first start, mapped by later ones (gguf/packed_cache.py)
    )
    pooling: str = "auto"  # embeddings: auto (the checkpoint's) | last | mean (layers/pooling.py)
    speculative: str = "auto"  # auto (adaptive) | off | ngram (always guess): spec_decode/proposer.py
    spec_tokens: int = 8  # the most tokens a sequence guesses per step
    spec_ngram_min: int = 2  # the shortest and longest suffix the n-gram lookup matches
    spec_ngram_max: int = 4
    cuda_graphs: str = "auto"  # auto (decode steps replayed from CUDA graphs on a GPU) | off: runner/decode_graphs.py

    def __post_init__(self):
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.pooling not in ("auto", "last", "mean"):
            raise ValueError(f"pooling must be auto, last or mean, got {self.pooling!r}")
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
        return cls(
            model=env_str("MINIVLLM_MODEL", None, env),
            dtype=env_str("MINIVLLM_DTYPE", "auto", env),
            device=env_str("MINIVLLM_DEVICE", "auto", env),
            block_size=env_int("MINIVLLM_BLOCK_SIZE", 16, env),
            kv_cache_mb=env_int("MINIVLLM_KV_CACHE_MB", None, env),
            gpu_memory_utilization=env_float("MINIVLLM_GPU_MEMORY_UTILIZATION", 0.9, env),
            max_num_seqs=env_int("MINIVLLM_MAX_NUM_SEQS", None, env),
            max_num_batched_tokens=env_int("MINIVLLM_MAX_NUM_BATCHED_TOKENS", 512, env),
            max_model_len=env_int("MINIVLLM_MAX_MODEL_LEN", None, env),
            quantization=env_str("MINIVLLM_QUANT", "auto", env),
            num_kv_blocks=env_int("MINIVLLM_NUM_KV_BLOCKS", None, env),
            kv_cache_dtype=env_str("MINIVLLM_KV_CACHE_DTYPE", "auto", env),
            cpu_isa=env_str("MINIVLLM_CPU_ISA", "auto", env),
            enable_prefix_caching=env_bool("MINIVLLM_PREFIX_CACHING", True, env),
            packed_cache=env_bool("MINIVLLM_PACKED_CACHE", True, env),
            pooling=env_str("MINIVLLM_POOLING", "auto", env),
            speculative=env_str("MINIVLLM_SPECULATIVE", "auto", env).lower(),
            spec_tokens=env_int("MINIVLLM_SPEC_TOKENS", 8, env),
            spec_ngram_min=env_int("MINIVLLM_SPEC_NGRAM_MIN", 2, env),
            spec_ngram_max=env_int("MINIVLLM_SPEC_NGRAM_MAX", 4, env),
            cuda_graphs=env_str("MINIVLLM_CUDA_GRAPHS", "auto", env).lower(),
        )
