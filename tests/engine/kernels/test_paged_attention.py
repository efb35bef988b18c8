"""The decode attention kernels against dense attention over each sequence's own tokens, over a
float32 cache and a float16 one."""

from __future__ import annotations

import pytest
import torch

HEADS, KV_HEADS, DIM, BLOCK, NUM_BLOCKS = 9, 3, 64, 16, 12  # SmolLM2's GQA group of three


def scattered_cache(lengths, seed=0):
    """A random cache and block tables handing each sequence scattered blocks."""
    torch.manual_seed(seed)
    k_cache = torch.randn(KV_HEADS, NUM_BLOCKS, BLOCK, DIM)
    v_cache = torch.randn(KV_HEADS, NUM_BLOCKS, BLOCK, DIM)
    order = torch.randperm(NUM_BLOCKS).tolist()
    widest = -(-max(lengths) // BLOCK)
    tables = []
    for length in lengths:
        blocks = [order.pop() for _ in range(-(-length // BLOCK))]
        tables.append(blocks + [0] * (widest - len(blocks)))
    return k_cache, v_cache, torch.tensor(tables), torch.tensor(lengths)


def dense(q, k_cache, v_cache, table, length, scale):
    keys = k_cache[:, table].reshape(KV_HEADS, -1, DIM)[:, :length].repeat_interleave(HEADS // KV_HEADS, 0)
    values = v_cache[:, table].reshape(KV_HEADS, -1, DIM)[:, :length].repeat_interleave(HEADS // KV_HEADS, 0)
    weights = torch.softmax((q[:, None] @ keys.transpose(1, 2)).squeeze(1) * scale, dim=-1)
    return (weights[:, None] @ values).squeeze(1)


def test_scores_softmax_values_match_dense_attention(cpp):
    lengths = [1, 16, 17, 40]  # one token, exactly a block, a block and one, three blocks less some
    k_cache, v_cache, tables, lens = scattered_cache(lengths)
    q = torch.randn(len(lengths), HEADS, DIM)
    scores = cpp.paged_attention_scores(q, k_cache, tables, lens, DIM**-0.5)
    assert scores.shape == (4, HEADS, 48)  # three blocks of 16, whole 16-float vectors
    assert torch.isinf(scores[0, :, 1:]).all() and torch.isfinite(scores[3, :, :40]).all()  # padding is -inf
    out = cpp.paged_attention_values(torch.softmax(scores, dim=-1), v_cache, tables, lens)
    for b, length in enumerate(lengths):
        torch.testing.assert_close(out[b], dense(q[b], k_cache, v_cache, tables[b], length, DIM**-0.5), rtol=1e-5, atol=1e-5)


def attend(cpp, q, k_cache, v_cache, tables, lengths):
    probs = torch.softmax(cpp.paged_attention_scores(q, k_cache, tables, lengths, 0.125), -1)
    return cpp.paged_attention_values(probs, v_cache, tables, lengths)


@pytest.mark.parametrize("index", [0, 1, 2])  # 5 tokens (under one vector), 33 (the longest), 20
def test_a_sequence_is_bit_identical_alone_and_in_a_batch(cpp, index):
    lengths = [5, 33, 20]
    k_cache, v_cache, tables, lens = scattered_cache(lengths)
    q = torch.randn(3, HEADS, DIM)
    together = attend(cpp, q, k_cache, v_cache, tables, lens)
    own_table = tables[index : index + 1, : -(-lengths[index] // BLOCK)].contiguous()
    alone = attend(cpp, q[index : index + 1].contiguous(), k_cache, v_cache, own_table, lens[index : index + 1])
    assert torch.equal(alone[0], together[index])


def test_lengths_and_blocks_outside_the_tables_are_refused(cpp):
    k_cache, v_cache, tables, _ = scattered_cache([16])
    with pytest.raises(RuntimeError, match="outside its block table"):
        cpp.paged_attention_scores(torch.randn(1, HEADS, DIM), k_cache, tables, torch.tensor([17]), 1.0)
    with pytest.raises(RuntimeError, match="block id outside the cache"):
        cpp.paged_attention_scores(torch.randn(1, HEADS, DIM), k_cache, torch.tensor([[NUM_BLOCKS]]), torch.tensor([3]), 1.0)


def test_a_float16_cache_gives_the_bits_of_its_values_widened_to_float32(cpp):
    """The kernels widen float16 exactly as they load it and then run the float32 code's sums."""
    lengths = [3, 16, 37]
    k_cache, v_cache, tables, lens = scattered_cache(lengths, seed=3)
    k16, v16 = k_cache.half(), v_cache.half()
    q = torch.randn(len(lengths), HEADS, DIM)
    scores = cpp.paged_attention_scores(q, k16, tables, lens, DIM**-0.5)
    assert torch.equal(scores, cpp.paged_attention_scores(q, k16.float(), tables, lens, DIM**-0.5))
    probs = torch.softmax(scores, dim=-1)
    out = cpp.paged_attention_values(probs, v16, tables, lens)
    assert torch.equal(out, cpp.paged_attention_values(probs, v16.float(), tables, lens))
    for b, length in enumerate(lengths):
        torch.testing.assert_close(
            out[b], dense(q[b], k16.float(), v16.float(), tables[b], length, DIM**-0.5), rtol=1e-5, atol=1e-5
        )


def test_a_cache_in_another_dtype_is_refused(cpp):
    k_cache, _, tables, lens = scattered_cache([4])
    with pytest.raises(RuntimeError, match="float32 or float16"):
        cpp.paged_attention_scores(torch.randn(1, HEADS, DIM), k_cache.bfloat16(), tables, lens, 1.0)
