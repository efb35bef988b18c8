"""Every GGUF block type de-quantized by torch (what a GGUF becomes on CUDA) gives exactly the
values of gguf's own reference de-quantization, on random blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from inference.engine.gguf.dequantize import BLOCK_TYPES, FLOAT_TYPES, dequantize

FLOAT16_FIELDS = {  # bytes of each block that hold float16 scales: random bytes there could be NaN
    "q4_0": (0,),
    "q4_1": (0, 2),
    "q5_0": (0,),
    "q5_1": (0, 2),
    "q8_0": (0,),
    "q2_k": (80, 82),
    "q3_k": (108,),
    "q4_k": (0, 2),
    "q5_k": (0, 2),
    "q6_k": (208,),
}


@pytest.mark.parametrize("kind", sorted(BLOCK_TYPES))
def test_each_block_type_matches_ggufs_reference(kind):
    _, block_bytes, weights = BLOCK_TYPES[kind]
    rng = np.random.default_rng(sorted(BLOCK_TYPES).index(kind))
    blocks = rng.integers(0, 256, (96, block_bytes), dtype=np.uint8)
    for at in FLOAT16_FIELDS[kind]:
        blocks[:, at : at + 2] = rng.normal(0, 0.05, 96).astype(np.float16).view(np.uint8).reshape(96, 2)
    expected = quants.dequantize(blocks.reshape(-1), GGMLQuantizationType[kind.upper()]).reshape(8, -1)
    ours = dequantize(torch.from_numpy(blocks.reshape(-1)), kind, (8, 96 * weights // 8), torch.float32)
    np.testing.assert_array_equal(ours.numpy(), expected)


@pytest.mark.parametrize("kind", sorted(FLOAT_TYPES))
def test_float_tensors_are_their_values_in_a_copy(kind):
    values = torch.randn(4, 16).to(FLOAT_TYPES[kind])
    raw = values.view(torch.uint8).reshape(-1)
    ours = dequantize(raw, kind, (4, 16), torch.float32)
    assert torch.equal(ours, values.float())
    ours.add_(1)  # a copy: the file's bytes never change
    assert torch.equal(raw.view(FLOAT_TYPES[kind]).reshape(4, 16), values)
