"""Paged attention through the model runner's block rows, against dense causal attention.

A one-layer probe model turns each token id into fixed random q/k/v, so the expected output of
every row is plain softmax attention over that sequence's tokens so far, whatever blocks hold
them and whatever else shares the step. Decodes are checked on both paths: our kernels
reading blocks in place (CPU float32) and the gathered torch path (every other device/dtype),
each over a float32 cache and a float16 one (the CPU default), against K/V rounded as stored;
and again as a sliding-window layer (Gemma 3's local layers), whose window is shorter than the
contexts, against dense attention under the window's mask.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.layers import cpu_kernels
from inference.engine.layers.attention import AttentionMetadata, PrefillChunk, paged_attention
from inference.engine.layers.attention.prefill import chunk_sdpa
from inference.engine.model_runner import ModelRunner
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.scheduler import ScheduledBatch
from inference.engine.sequence import Sequence

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 8, 4


class AttentionProbe(nn.Module):
    kv_shape = (1, KV_HEADS, DIM)

    def __init__(self, vocab: int = 64, window: int | None = None):
        super().__init__()
        self.window = window
        torch.manual_seed(0)
        self.qkv = nn.Embedding(vocab, (HEADS + 2 * KV_HEADS) * DIM)
        self.last_out = None

    def forward(self, input_ids, positions, kv_caches, meta):
        qkv = self.qkv(input_ids).view(len(input_ids), HEADS + 2 * KV_HEADS, DIM)
        q, k, v = qkv.split([HEADS, KV_HEADS, KV_HEADS], dim=1)
        self.last_out = paged_attention(q, k, v, *kv_caches[0], meta, DIM**-0.5, self.window)
        return self.last_out.reshape(len(input_ids), -1)

    def compute_logits(self, hidden):
        return hidden

    def expected(self, token_ids: list[int], kv_dtype=torch.float32) -> torch.Tensor:
        """[len, heads, dim]: causal attention of every position over the ones before it, K and V
        rounded to the cache's dtype."""
        n = len(token_ids)
        qkv = self.qkv(torch.tensor(token_ids)).view(n, HEADS + 2 * KV_HEADS, DIM)
        q, k, v = (t.transpose(0, 1) for t in qkv.split([HEADS, KV_HEADS, KV_HEADS], dim=1))
        k, v = (t.to(kv_dtype).float() for t in (k, v))
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=0) for t in (k, v))
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        if self.window is not None:  # each query sees its own key and the window - 1 before it
            mask &= torch.ones(n, n, dtype=torch.bool).triu(1 - self.window)
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=DIM**-0.5).transpose(0, 1)


@pytest.fixture(autouse=True, params=["kernels", "torch"])
def decode_path(request, monkeypatch):
    if request.param == "kernels":
        request.getfixturevalue("needs_cpu_kernels")  # skips where MINIVLLM_CPU_KERNELS=0 turned them off
        assert cpu_kernels.kernels() is not None, "the AVX2 kernels should build on the machines we test on"
    else:
        monkeypatch.setattr(cpu_kernels, "kernels", lambda: None)
    return request.param


def sequence(name: str, tokens: list[int], blocks: list[int]) -> Sequence:
    seq = Sequence(name, tokens, SamplingParams(max_tokens=8))
    seq.block_table = blocks  # deliberately scattered and out of order
    seq.slot = ord(name) - ord("a")  # the batch slot a running sequence holds: its block table's device row
    return seq


@pytest.fixture(params=[torch.float32, torch.float16], ids=["float32-cache", "float16-cache"])
def kv_dtype(request):
    return request.param


def run_step(model_runner: ModelRunner, probe: AttentionProbe, decodes, prefills) -> None:
    """Runs one step and checks every row of it against the dense reference."""
    batch = ScheduledBatch(decodes=decodes, prefills=prefills)
    with torch.no_grad():
        model_runner.run(batch)
        out = probe.last_out
        row = 0
        for seq, n in [(s, 1) for s in decodes] + prefills:
            start = seq.num_computed_tokens
            expected = probe.expected(seq.token_ids[: start + n], model_runner.kv_caches[0][0].dtype)[start:]
            torch.testing.assert_close(out[row : row + n], expected, rtol=1e-5, atol=1e-5)
            seq.num_computed_tokens += n
            row += n


@pytest.mark.parametrize("window", [None, 3], ids=["full", "window-3"])
def test_decodes_and_chunked_prefills_in_one_step_match_dense_attention(kv_dtype, window):
    probe = AttentionProbe(window=window)
    model_runner = ModelRunner(
        probe, num_blocks=16, block_size=BLOCK, dtype=torch.float32, device=torch.device("cpu"), kv_dtype=kv_dtype
    )
    assert model_runner.kv_caches[0][0].dtype == kv_dtype
    a = sequence("a", [1, 2, 3, 4, 5], [7, 2, 12])  # 5 tokens: one block and a bit
    b = sequence("b", [6, 7, 8, 9, 10, 11, 12, 13, 14], [11, 3, 0, 6])  # prefilled in two chunks
    c = sequence("c", [15, 16, 17, 18], [5, 14, 9])  # exactly one block, then grows into the next
    run_step(model_runner, probe, [], [(a, 5), (b, 6)])
    run_step(model_runner, probe, [], [(b, 3), (c, 4)])  # b's second chunk attends to its cached first
    for token in (20, 21, 22, 23, 24):  # decodes of different lengths side by side, crossing blocks
        for seq in (a, b, c):
            seq.token_ids.append(token)
        run_step(model_runner, probe, [a, b, c], [])
    d = sequence("d", [30, 31, 32], [1, 4])
    a.token_ids.append(25)
    run_step(model_runner, probe, [a], [(d, 3)])  # a decode and a fresh prefill in one step


def test_an_empty_step_attends_to_nothing():
    probe = AttentionProbe()
    model_runner = ModelRunner(probe, num_blocks=4, block_size=BLOCK, dtype=torch.float32, device=torch.device("cpu"))
    empty = torch.empty(0, HEADS, DIM)
    meta = AttentionMetadata(write_rows=torch.empty(0, dtype=torch.long), num_decodes=0, decode=None, prefills=[])
    k_cache, v_cache = model_runner.kv_caches[0]
    out = paged_attention(empty, empty[:, :KV_HEADS], empty[:, :KV_HEADS], k_cache, v_cache, meta, 1.0)
    assert out.shape == (0, HEADS, DIM)


@pytest.mark.parametrize("earlier", [0, 11], ids=["whole-context", "over-earlier-context"])
def test_the_form_cuda_gives_sdpa_computes_the_masked_forms_numbers(earlier):
    """CUDA's prefill call (K/V repeated per group, the offset causal mask as causal_lower_right,
    which keep it on the flash / efficient back ends) equals the CPU's (boolean mask, GQA in SDPA)."""
    n, total = 7, earlier + 7
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, 6, n, DIM, generator=generator)
    keys = torch.randn(2, total, DIM, generator=generator)
    values = torch.randn(2, total, DIM, generator=generator)
    mask = torch.arange(total)[None, :] <= torch.arange(earlier, total)[:, None] if earlier else None
    chunk = PrefillChunk(start=0, end=n, context_len=total, block_rows=None, causal_mask=mask)
    plain = chunk_sdpa(query, keys, values, chunk, 0.25, fused=False)
    fused = chunk_sdpa(query, keys, values, chunk, 0.25, fused=True)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
