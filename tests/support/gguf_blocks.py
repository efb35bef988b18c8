"""Random GGUF blocks of every type the engine reads: any bit pattern is a valid block once its
float16 scales are finite, so random bytes with sane scales test decoding and kernels on every
level, sub-block scale and minimum a file can hold (a quantizer would only visit some)."""

from __future__ import annotations

import numpy as np

# Each type's (weights a block, bytes a block, offsets of its float16 scales within the block).
SCALE_FIELDS = {
    "q4_0": (32, 18, (0,)),
    "q4_1": (32, 20, (0, 2)),
    "q5_0": (32, 22, (0,)),
    "q5_1": (32, 24, (0, 2)),
    "q8_0": (32, 34, (0,)),
    "iq4_nl": (32, 18, (0,)),
    "q2_k": (256, 84, (80, 82)),
    "q3_k": (256, 110, (108,)),
    "q4_k": (256, 144, (0, 2)),
    "q5_k": (256, 176, (0, 2)),
    "q6_k": (256, 210, (208,)),
    "iq4_xs": (256, 136, (0,)),
}
KERNEL_TYPES = ("q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs")  # block_linear's


def random_blocks(kind: str, rows: int, columns: int, seed: int = 0, scale: float = 0.01) -> np.ndarray:
    """uint8 [rows, row bytes]: a matrix of random `kind` blocks whose float16 scales lie in (scale / 4, scale)."""
    weights, size, fields = SCALE_FIELDS[kind]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows * columns // weights, size), dtype=np.uint8)
    for offset in fields:
        scales = rng.uniform(scale / 4, scale, size=len(blocks)).astype(np.float16)
        blocks[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def dequantized(kind: str, raw: np.ndarray, columns: int) -> np.ndarray:
    """gguf-py's float32 de-quantization of a raw [rows, row bytes] matrix."""
    from gguf import GGMLQuantizationType, quants

    return quants.dequantize(raw, GGMLQuantizationType[kind.upper()]).reshape(raw.shape[0], columns)
