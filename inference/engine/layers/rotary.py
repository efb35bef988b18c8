"""Rotary position embeddings (the rotate-half layout HF Llama/Qwen2 checkpoints use)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .cpu_kernels import cpu_kernels_for


def rope_parameters(hf_config) -> dict:
    """transformers 5 keeps theta and scaling in `rope_parameters`; older configs use rope_theta/rope_scaling."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    params = {**scaling, **params}
    params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def inverse_frequencies(head_dim: int, params: dict) -> torch.Tensor:
    base = float(params["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    kind = params["rope_type"]
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(params["factor"])
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, params)
    if kind == "proportional":  # Gemma 4's full layers: only the first frequencies turn, the rest stay 0
        turned = int(float(params.get("partial_rotary_factor") or 1.0) * head_dim // 2)
        return torch.cat([inv_freq[:turned], torch.zeros(len(inv_freq) - turned, dtype=inv_freq.dtype)])
    if kind == "longrope":  # Phi-3's: each frequency divided by its factor (a GGUF's come as a tensor, at load)
        factors = params.get("ext_factors")
        return inv_freq / torch.tensor(factors, dtype=torch.float64) if factors is not None else inv_freq
    raise ValueError(f"rope type {kind!r} is not supported (supported: default, linear, llama3, longrope, proportional)")


def _llama3_frequencies(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    """Llama 3.x: long wavelengths are slowed by `factor`, short ones kept, the band between blended."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_len = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    in_band = (wavelen <= old_len / low) & (wavelen >= old_len / high)
    return torch.where(in_band, blended, out)


FIRST_ROWS = 4096  # positions whose tables a CPU load computes; later ones as a step first reaches them


class RotaryEmbedding(torch.nn.Module):
    """cos/sin for every position, each row computed once; a step only indexes them.

    On the CPU the tables are allocated whole (untouched pages cost nothing) and filled to
    FIRST_ROWS at load, then in place, doubling, as steps reach further: the model runner calls
    `ensure` with each step's furthest position, known on the host (a caller of the model outside
    the runner does too): a 131,072-token context's tables, computed at load, took ~4 s of Gemma 4
    E2B's 6 s. Elsewhere (CUDA) every row is filled when the kernels are bound."""

    def __init__(self, head_dim: int, max_positions: int, params: dict):
        super().__init__()
        self.max_positions = max_positions
        self.inv_freq = inverse_frequencies(head_dim, params)
        self.attention_factor = float(params.get("attention_factor") or 1.0)  # LongRoPE scales cos and sin
        half = len(self.inv_freq)
        self.register_buffer("cos", torch.empty(max_positions, half, dtype=torch.float32), persistent=False)
        self.register_buffer("sin", torch.empty(max_positions, half, dtype=torch.float32), persistent=False)
        self.filled = 0
        self.ensure(min(max_positions, FIRST_ROWS))
        self._cpp = None  # the kernels, once bind_kernels found they apply

    def ensure(self, rows: int) -> None:
        """Rows 0..rows-1 of the tables computed (at least doubling what is there, up to the context)."""
        if rows <= self.filled:
            return
        end = min(self.max_positions, max(rows, 2 * self.filled))
        self._fill(self.filled, end)
        self.filled = end

    def _fill(self, start: int, end: int) -> None:
        """Rows start..end-1: the angles in float64, rounded once."""
        angles = torch.outer(torch.arange(start, end, dtype=torch.float64), self.inv_freq)
        cos, sin = angles.cos(), angles.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        self.cos[start:end] = cos.to(self.cos.device, self.cos.dtype)
        self.sin[start:end] = sin.to(self.sin.device, self.sin.dtype)

    def scale_frequencies(self, factors: torch.Tensor) -> None:
        """Divides each frequency by its factor: a GGUF's `rope_freqs` (Llama 3.x's scaling, as llama.cpp applies it)."""
        if factors.shape != self.inv_freq.shape:
            raise ValueError(
                f"rope_freqs has {tuple(factors.shape)} factors, the rotary {tuple(self.inv_freq.shape)} frequencies"
            )
        self.inv_freq = self.inv_freq / factors.double().cpu()
        self.refill()

    def refill(self) -> None:
        """The rows filled so far computed again (new frequencies, or tables a dtype cast rounded)."""
        self._fill(0, self.filled)

    def bind_kernels(self, device: torch.device, dtype: torch.dtype) -> None:
        """Chosen once at load: on CPU float32 our kernel rotates in one op instead of nine (any even head_dim).
        Off the CPU every row now: a device's step positions are not read on the host."""
        self._cpp = cpu_kernels_for(device, dtype)
        if self.cos.device.type != "cpu":
            self.ensure(self.max_positions)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> RopeTables:
        """cos/sin rows for this step's positions: looked up once per step, shared by every layer."""
        cos, sin = self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)
        if self._cpp is not None:
            cos, sin = cos.contiguous(), sin.contiguous()
        return RopeTables(cos, sin, self._cpp)


@dataclass(frozen=True)
class RopeTables:
    """One step's rotation: its cos/sin rows, and the implementation chosen at load."""

    cos: torch.Tensor  # [T, 1, head_dim / 2]
    sin: torch.Tensor
    cpp: object = None

    def rotate_(self, x: torch.Tensor) -> torch.Tensor:
        """Rotates a [T, heads, head_dim] tensor (or a view of one) in place by its tokens'
        positions, rotate-half layout; returns it. The kernel and the torch expression round alike."""
        if self.cpp is not None:
            self.cpp.rotary_inplace(x, self.cos, self.sin)
            return x
        return x.copy_(rotated(x, self.cos, self.sin))


def rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The torch expression of the rotation (CUDA, bf16; and what the kernel must equal)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
