"""GGUF tensors de-quantized by torch, on whatever device their bytes are on.

The CPU keeps a GGUF's blocks and multiplies them as they are (our kernels); CUDA runs dense
weights in the model's dtype. So for CUDA each tensor's raw bytes go to the GPU as they lie in
the file and become bf16 / float16 there, one tensor at a time: no float32 copy of the model ever
exists in host memory (transformers' GGUF loading de-quantizes the whole file to float32 on the
host first). The same code runs on the CPU under MINIVLLM_CPU_KERNELS=0, which is how it is tested.

Each function takes a tensor's blocks as uint8 [blocks, block bytes] and returns float32
[blocks, weights per block]. The layouts are ggml's (ggml-common.h): float16 scales, 4-bit values
in nibbles (low nibbles first), k-quant super-blocks of 256 weights in 16 or 8 sub-blocks.
"""

from __future__ import annotations

import torch

K = 256  # weights in a k-quant super-block


def _f16(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 stored at byte `at` of each block, as float32 [blocks, 1]."""
    return blocks[:, at : at + 2].contiguous().view(torch.float16).float()


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[..., m] bytes -> [..., 2, m]: their low nibbles, then their high ones."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-2)


def _bits(values: torch.Tensor, count: int, width: int = 1) -> torch.Tensor:
    """[..., m] integers -> [..., count, m]: bit field i (of `width` bits) of each."""
    shifts = torch.arange(count, device=values.device) * width
    return (values.unsqueeze(-2).int() >> shifts[:, None]) & ((1 << width) - 1)


def q4_0(b: torch.Tensor) -> torch.Tensor:  # d, 16 bytes of 4-bit levels; w = d * (level - 8)
    return _f16(b, 0) * (_nibbles(b[:, 2:18]).flatten(1).float() - 8)


def q4_1(b: torch.Tensor) -> torch.Tensor:  # d, m, 16 bytes of levels; w = d * level + m
    return _f16(b, 0) * _nibbles(b[:, 4:20]).flatten(1).float() + _f16(b, 2)


def _five_bit(b: torch.Tensor, high_at: int) -> torch.Tensor:
    """The 32 levels of a Q5_0 / Q5_1 block: nibbles, and a fifth bit each from a 32-bit word."""
    high = _bits(b[:, high_at : high_at + 4].contiguous().view(torch.int32), 32).flatten(1)  # [blocks, 32]
    return (_nibbles(b[:, high_at + 4 : high_at + 20]).flatten(1).int() | (high << 4)).float()


def q5_0(b: torch.Tensor) -> torch.Tensor:  # d, 32 fifth bits, 16 bytes of nibbles; w = d * (level - 16)
    return _f16(b, 0) * (_five_bit(b, 2) - 16)


def q5_1(b: torch.Tensor) -> torch.Tensor:  # d, m, fifth bits, nibbles; w = d * level + m
    return _f16(b, 0) * _five_bit(b, 4) + _f16(b, 2)


def q8_0(b: torch.Tensor) -> torch.Tensor:  # d, 32 int8 levels
    return _f16(b, 0) * b[:, 2:34].view(torch.int8).float()


def _k_scales_and_mins(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K: 12 bytes holding eight 6-bit scales and eight 6-bit minimums. Sub-blocks 0-3
    keep theirs in the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums); sub-blocks 4-7 theirs
    in the nibbles of bytes 8-11, with the top two bits of bytes 0-7 above them."""
    s = packed.int()
    scales = torch.cat((s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)), dim=1)
    mins = torch.cat((s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)), dim=1)
    return scales.float(), mins.float()


def q4_k(b: torch.Tensor) -> torch.Tensor:
    """d, dmin, packed scales, 128 bytes: each 32 bytes give a sub-block's levels in their low
    nibbles and the next sub-block's in their high ones. w = d * scale * level - dmin * min."""
    scales, mins = _k_scales_and_mins(b[:, 4:16])
    levels = _nibbles(b[:, 16:144].reshape(-1, 4, 32)).reshape(-1, 8, 32).float()
    weights = _f16(b, 0)[:, :, None] * scales[:, :, None] * levels - _f16(b, 2)[:, :, None] * mins[:, :, None]
    return weights.reshape(-1, K)


def q5_k(b: torch.Tensor) -> torch.Tensor:
    """Q4_K's layout with a fifth bit per level: sub-block s takes bit s of each of 32 bytes."""
    scales, mins = _k_scales_and_mins(b[:, 4:16])
    high = _bits(b[:, 16:48], 8)  # [blocks, 8 sub-blocks, 32]
    levels = (_nibbles(b[:, 48:176].reshape(-1, 4, 32)).reshape(-1, 8, 32).int() | (high << 4)).float()
    weights = _f16(b, 0)[:, :, None] * scales[:, :, None] * levels - _f16(b, 2)[:, :, None] * mins[:, :, None]
    return weights.reshape(-1, K)


def q6_k(b: torch.Tensor) -> torch.Tensor:
    """128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales (one per 16 weights), d. Each
    half of 128 weights: quarter k takes the low or high nibbles (k // 2) of the half's first or
    second 32 low bytes (k % 2), and bits 2k, 2k+1 of its 32 high bytes. w = d * scale * (level - 32)."""
    nibbles = _nibbles(b[:, 0:128].reshape(-1, 2, 2, 32))  # [blocks, half, which 32 bytes, low / high, 32]
    low = nibbles.transpose(2, 3).reshape(-1, 2, 4, 32).int()  # [blocks, half, quarter, 32]
    high = _bits(b[:, 128:192].reshape(-1, 2, 32), 4, width=2)
    levels = ((low | (high << 4)) - 32).float().reshape(-1, 2, 4, 2, 16)
    scales = b[:, 192:208].view(torch.int8).float().reshape(-1, 2, 4, 2, 1)
    return (_f16(b, 208)[:, :, None, None, None] * scales * levels).reshape(-1, K)


def q2_k(b: torch.Tensor) -> torch.Tensor:
    """16 bytes of 4-bit scale and min pairs (one per 16 weights), 64 bytes of 2-bit levels, d, dmin.
    Each half of 128 weights: quarter j is bits 2j, 2j+1 of the half's 32 level bytes."""
    levels = _bits(b[:, 16:80].reshape(-1, 2, 32), 4, width=2).float().reshape(-1, 2, 4, 2, 16)
    packed = b[:, 0:16].reshape(-1, 2, 4, 2, 1)
    d, dmin = _f16(b, 80)[:, :, None, None, None], _f16(b, 82)[:, :, None, None, None]
    return (d * (packed & 0xF).float() * levels - dmin * (packed >> 4).float()).reshape(-1, K)


def q3_k(b: torch.Tensor) -> torch.Tensor:
    """32 bytes of high bits, 64 bytes of 2-bit levels, 12 bytes of sixteen 6-bit scales, d. A
    level is its 2 bits less 4 where its high bit is clear; w = d * (scale - 32) * level. Scale i
    has its low nibble in byte i % 8 (low nibble for i < 8) and its top 2 bits in byte 8 + i % 4
    (bits 2 * (i // 4))."""
    packed = b[:, 96:108]
    low = torch.cat((packed[:, 0:8] & 0xF, packed[:, 0:8] >> 4), dim=1).int()
    top = _bits(packed[:, 8:12], 4, width=2).flatten(1)  # [blocks, 16]: i // 4 major, i % 4 minor
    scales = ((low | (top << 4)) - 32).float().reshape(-1, 2, 4, 2, 1)
    twos = _bits(b[:, 32:96].reshape(-1, 2, 32), 4, width=2)  # [blocks, half, j, 32]
    high = _bits(b[:, 0:32], 8).reshape(-1, 2, 4, 32)  # bit 4 * half + j of each byte
    levels = (twos - 4 * (1 - high)).float().reshape(-1, 2, 4, 2, 16)
    return (_f16(b, 108)[:, :, None, None, None] * scales * levels).reshape(-1, K)


BLOCK_TYPES = {  # type: (function, bytes per block, weights per block)
    "q4_0": (q4_0, 18, 32),
    "q4_1": (q4_1, 20, 32),
    "q5_0": (q5_0, 22, 32),
    "q5_1": (q5_1, 24, 32),
    "q8_0": (q8_0, 34, 32),
    "q2_k": (q2_k, 84, K),
    "q3_k": (q3_k, 110, K),
    "q4_k": (q4_k, 144, K),
    "q5_k": (q5_k, 176, K),
    "q6_k": (q6_k, 210, K),
}
FLOAT_TYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TYPES = (*BLOCK_TYPES, *FLOAT_TYPES)


def dequantize(raw: torch.Tensor, kind: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor's bytes (uint8, on the device it is computed on) as `dtype` values of `shape`."""
    if kind in FLOAT_TYPES:
        return raw.view(FLOAT_TYPES[kind]).reshape(shape).to(dtype, copy=True)  # never a view of the mapped file
    if kind not in BLOCK_TYPES:
        raise ValueError(f"no torch de-quantization of GGUF type {kind}")
    function, block_bytes, _ = BLOCK_TYPES[kind]
    return function(raw.reshape(-1, block_bytes)).reshape(shape).to(dtype)
