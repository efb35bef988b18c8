"""Every kernel and de-quantizer on a real k-quant file's own blocks, against gguf-py's de-quantization.

The random-block tests (test_block_linear.py, test_group_linear.py, gguf/test_dequantize.py) visit
every level, sub-block scale and minimum a block can hold; these take the blocks llama.cpp's
quantizer actually wrote: Gemma 3 270M in the Q4_K_M mix (Q4_K, Q6_K, Q5_0 and Q8_0 matrices),
which `make test` fetches once into ~/.cache/minivllm (tests/support/real_gguf.py). Eight rows of
every matrix (its first, its last and six between) keep the module to a few seconds; where the file
is not there (outside make) the tests skip naming `make real-gguf`.
"""

from __future__ import annotations

import zlib
from collections import Counter

import numpy as np
import pytest
import torch

from inference.engine.gguf.dequantize import dequantize
from tests.engine.kernels.test_block_linear import activation_blocks, raw_tensor
from tests.engine.kernels.test_group_linear import documented_order_of_groups
from tests.support import real_gguf
from tests.support.engine_helpers import dequantize_groups
from tests.support.gguf_blocks import SCALE_FIELDS, dequantized

KINDS = ("q4_k", "q6_k", "q5_0", "q8_0")  # the file's block types (its f32 tensors are norms)
BLOCK_KERNEL_KINDS = ("q4_k", "q6_k", "q5_0")  # kernels/blocks/; Q8_0 goes to the group kernel
SAMPLED_ROWS = 8
BATCH = 19  # a pass of 12 rows (AVX2: passes of 2), then 7 left; AMX: a tile of 16, then 3 in a padded one


@pytest.fixture(scope="module")
def real():
    return real_gguf.tensors_or_skip()


def row_ids(real, name: str) -> np.ndarray:
    """The sampled rows of a matrix: its first, its last and six between (the same every run)."""
    rows = real.index[name].shape[0]
    between = np.random.default_rng(zlib.crc32(name.encode())).choice(np.arange(1, rows - 1), SAMPLED_ROWS - 2, replace=False)
    return np.concatenate([[0], between, [rows - 1]])


def sampled(real, kind: str) -> dict[int, list[np.ndarray]]:
    """Per row length K: the sampled rows of each `kind` matrix of that length, as uint8 [rows, row bytes] copies."""
    by_length: dict[int, list[np.ndarray]] = {}
    for name in real.names(kind):
        by_length.setdefault(real.index[name].shape[1], []).append(np.array(real.matrix(name)[row_ids(real, name)]))
    return by_length


def activations(rows: int, K: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, K, generator=torch.Generator().manual_seed(seed))


def test_the_file_is_the_q4_k_m_mix_these_tests_cover(real):
    """So a different file (or a header misread) cannot leave a type untested without saying so."""
    counts = Counter(entry.type for entry in real.index.values())
    assert counts == {"q4_k": 27, "q6_k": 9, "q5_0": 81, "q8_0": 10, "f32": 109}, counts
    assert real.architecture == "gemma3"
    assert all(real.names(kind) for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_kernels_rows_are_gguf_pys_bit_for_bit(cpp, real, kind):
    """gguf_dequantize_rows (the embedding lookup, FileEmbedding) over each whole mapped matrix."""
    for name in real.names(kind):
        matrix, ids = real.matrix(name), row_ids(real, name)
        expected = torch.from_numpy(dequantized(kind, np.array(matrix[ids]), real.index[name].shape[1]))
        got = cpp.gguf_dequantize_rows(
            torch.from_numpy(matrix.reshape(-1)), real.index[name].shape[1], kind, torch.from_numpy(ids)
        )
        assert torch.equal(got, expected), name


@pytest.mark.parametrize("kind", KINDS)
def test_the_torch_dequantizer_gives_gguf_pys_values(real, kind):
    """gguf/dequantize.py, what a GGUF becomes on CUDA (no CPU kernels needed)."""
    for K, parts in sampled(real, kind).items():
        raw = np.concatenate(parts)
        expected = dequantized(kind, raw, K)
        ours = dequantize(torch.from_numpy(raw.reshape(-1)), kind, (raw.shape[0], K), torch.float32)
        np.testing.assert_array_equal(ours.numpy(), expected, err_msg=f"{kind}, K = {K}")
        in_bf16 = dequantize(torch.from_numpy(raw.reshape(-1)), kind, (raw.shape[0], K), torch.bfloat16)
        assert torch.equal(in_bf16, torch.from_numpy(expected).bfloat16()), f"{kind}, K = {K}"  # CUDA's dtype: one rounding


@pytest.mark.parametrize("kind", BLOCK_KERNEL_KINDS)
def test_block_kernel_products_match_gguf_pys_weights_on_every_isa(cpp, real, kind, isas):
    """Within float32 rounding of a float64 product of gguf-py's weights and the int8 activation
    blocks (test_block_linear.py's tolerance), every ISA the same bits, and within int8 rounding of
    the float64 product with the activations as they are. Each length's matrices are packed as the
    load packs a fused projection: one call, each tensor a part, its rows in a given order."""
    S = SCALE_FIELDS[kind][0]
    for K, parts in sampled(real, kind).items():
        raw = np.concatenate(parts)
        channels = raw.shape[0]
        order = torch.from_numpy(np.random.default_rng(K).permutation(channels))
        packed = cpp.pack_file_weights([([raw_tensor(part) for part in parts], K, kind, order)])[0]
        assert torch.equal(packed, cpp.block_pack([raw_tensor(raw)], K, kind, order)), K
        weight = torch.from_numpy(dequantized(kind, raw, K)).double()[order]
        x = activations(BATCH, K, seed=K)
        exact = activation_blocks(x, S) @ weight.T
        magnitude = activation_blocks(x, S).abs() @ weight.abs().T
        first = None
        for isa in isas:  # the vector versions and, where the CPU has them, the AMX tiles
            out = cpp.block_linear(x, packed, channels, kind, isa)
            assert ((out.double() - exact).abs() <= 1e-6 * magnitude + 1e-30).all(), (K, isa)
            first = out if first is None else first
            assert torch.equal(out, first), (K, isa)  # every ISA: the same bits
        plain = x.double() @ weight.T
        assert (first.double() - plain).norm() / plain.norm() < 1.5e-2, K  # int8 activation blocks: ~0.7% here


def test_group_kernel_products_on_real_q8_0_blocks_on_every_isa(cpp, real, isas):
    """Q8_0 matrices (the embedding, which Gemma ties as its lm_head, and V projections) as the load
    takes them (gguf_groups): levels, scales and minimums that are gguf-py's weights exactly, then
    group_linear on every ISA bit for bit as group_dot.h documents it (test_group_linear.py) and within
    its 2e-4 of the float64 product."""
    for K, parts in sampled(real, "q8_0").items():
        raw = np.concatenate(parts)
        channels = raw.shape[0]
        levels, scales, minimums = cpp.gguf_groups(raw_tensor(raw), channels, K, "q8_0")
        weight = torch.from_numpy(dequantized("q8_0", raw, K))
        assert torch.equal(dequantize_groups(levels, scales, minimums), weight), K
        packed = cpp.group_pack_weight(levels, scales, minimums, 8)
        x = activations(BATCH, K, seed=K)
        expected = documented_order_of_groups(x, levels, scales, minimums)
        for isa in isas:
            assert torch.equal(cpp.group_linear(x, packed, channels, 8, isa), expected), (K, isa)
        plain = x.double() @ weight.double().T
        assert (expected.double() - plain).norm() / plain.norm() < 2e-4, K
