"""The Triton paged decode kernel CUDA runs, checked on the CPU under Triton's interpreter against
the gathered path it replaces (its reference): scattered block tables, GQA with a group that is
not a power of two, contexts of one token, of whole blocks and between."""

from __future__ import annotations

import os

import pytest
import torch

from inference.engine.layers.attention import decode_triton
from inference.engine.layers.attention.decode_gathered import GatheredDecode

pytestmark = pytest.mark.skipif(not decode_triton.triton_available(), reason="Triton is not installed here")

KV_HEADS, GROUP, DIM, BLOCK, NUM_BLOCKS = 3, 3, 64, 16, 24


@pytest.fixture
def interpreted():
    """The module, its kernel run by Triton's interpreter (tests/conftest.py chose it for a machine
    without a GPU before anything imported Triton)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU is here: the kernel runs compiled (bench/gpu_check.py)")
    return decode_triton


def case(dtype, lengths):
    generator = torch.Generator().manual_seed(3)
    k_cache = torch.randn(KV_HEADS, NUM_BLOCKS, BLOCK, DIM, generator=generator).to(dtype)
    v_cache = torch.randn(KV_HEADS, NUM_BLOCKS, BLOCK, DIM, generator=generator).to(dtype)
    q = torch.randn(len(lengths), KV_HEADS * GROUP, DIM, generator=generator).to(dtype)
    width = -(-max(lengths) // BLOCK)
    order = torch.randperm(NUM_BLOCKS, generator=generator)
    tables = torch.stack([order.roll(7 * i)[:width] for i in range(len(lengths))])  # scattered, out of order
    return q, k_cache, v_cache, tables, torch.tensor(lengths)


def reference(q, k_cache, v_cache, tables, lengths, scale, window=None):
    offsets = (torch.arange(KV_HEADS) * NUM_BLOCKS)[:, None, None]
    gathered = GatheredDecode.build(None, tables, lengths, block_size=BLOCK, head_block_offsets=offsets)
    return gathered.attend(q.float(), k_cache.float(), v_cache.float(), scale, window)


@pytest.mark.parametrize(
    ("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 3e-2)], ids=["f32", "f16", "bf16"]
)
def test_the_kernel_reads_blocks_in_place_as_the_gathered_path_computes(interpreted, dtype, tolerance):
    lengths = [1, 16, 17, 100, 33]
    q, k_cache, v_cache, tables, lengths_t = case(dtype, lengths)
    scale = DIM**-0.5
    ours = interpreted.paged_decode(q, k_cache, v_cache, tables, lengths_t, scale)
    assert ours.shape == q.shape and ours.dtype == dtype
    torch.testing.assert_close(
        ours.float(), reference(q, k_cache, v_cache, tables, lengths_t, scale), rtol=tolerance, atol=tolerance
    )


def test_entries_past_a_context_are_never_read(interpreted):
    """Stale table entries and the keys past a row's length change nothing (a graph's padded table)."""
    q, k_cache, v_cache, tables, lengths = case(torch.float32, [20, 5])
    before = interpreted.paged_decode(q, k_cache, v_cache, tables, lengths, 0.125)
    tables[1, 1] = NUM_BLOCKS - 1  # past row 1's one block
    k_cache[:, tables[0, 1], 4:] = float("nan")  # row 0 reads positions 16..19 of its second block only
    v_cache[:, tables[0, 1], 4:] = float("inf")
    after = interpreted.paged_decode(q, k_cache, v_cache, tables, lengths, 0.125)
    assert torch.equal(before, after)


def test_a_sliding_window_reads_only_its_last_keys(interpreted):
    """Windows that start mid-block, on a block's edge, and that cover a whole short context; the
    keys and values before a window are poisoned, so reading one would show."""
    lengths, window = [100, 40, 5, 33], 24
    q, k_cache, v_cache, _, lengths_t = case(torch.float32, lengths)
    blocks = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(5))
    tables = torch.stack([blocks[7 * i : 7 * i + 7] for i in range(3)] + [blocks[21:24].repeat(3)[:7]])  # no block shared
    expected = reference(q, k_cache, v_cache, tables, lengths_t, 0.125, window)
    for row, length in enumerate(lengths):
        for position in range(max(0, length - window)):
            block, offset = tables[row, position // BLOCK], position % BLOCK
            k_cache[:, block, offset] = float("nan")
            v_cache[:, block, offset] = float("nan")
    ours = interpreted.paged_decode(q, k_cache, v_cache, tables, lengths_t, 0.125, window)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
