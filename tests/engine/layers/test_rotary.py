"""Rotary tables: computed as steps first reach their rows (a 131,072-token context's tables no
longer cost a load seconds), each row the same as a table computed whole, on every path."""

from __future__ import annotations

import math

import torch

from inference.engine.layers import rotary
from inference.engine.layers.rotary import RotaryEmbedding

PARAMS = {"rope_type": "default", "rope_theta": 1_000_000.0}


def whole_tables(head_dim: int, positions: int, params: dict) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = rotary.inverse_frequencies(head_dim, params)
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def test_a_load_fills_the_first_rows_and_a_step_fills_what_it_reaches():
    embedding = RotaryEmbedding(64, 100_000, PARAMS)
    assert embedding.filled == rotary.FIRST_ROWS
    positions = torch.tensor([3, 70_000, 5])
    tables = embedding.tables(positions, torch.float32)
    assert 70_001 <= embedding.filled <= 100_000
    cos, sin = whole_tables(64, 100_000, PARAMS)
    assert torch.equal(tables.cos[:, 0], cos[positions]) and torch.equal(tables.sin[:, 0], sin[positions])
    assert torch.equal(embedding.cos[: embedding.filled], cos[: embedding.filled])


def test_scaled_frequencies_recompute_the_filled_rows():
    """A GGUF's rope_freqs (Gemma 4's proportional full layers: 1e30 stills a frequency) arrive after the first fill."""
    embedding = RotaryEmbedding(64, 50_000, PARAMS)
    factors = torch.ones(32)
    factors[8:] = 1e30
    embedding.scale_frequencies(factors)
    embedding.ensure(50_000)
    inv_freq = rotary.inverse_frequencies(64, PARAMS) / factors.double()
    angles = torch.outer(torch.arange(50_000, dtype=torch.float64), inv_freq)
    assert torch.equal(embedding.cos, angles.cos().float()) and torch.equal(embedding.sin, angles.sin().float())
    assert torch.all(embedding.cos[:, 8:] == 1) and math.isclose(float(embedding.sin[:, 8:].abs().max()), 0.0, abs_tol=1e-20)


def test_an_engine_serving_past_the_first_rows_gives_the_same_logits_as_one_computed_whole(
    monkeypatch, tiny_hf, smollm_tokenizer
):
    """A prompt longer than FIRST_ROWS, chunked: the step that first reaches a row computes it."""
    from tests.support.engine_helpers import engine_for, prefill_logits

    ids = torch.randint(3, 49152, (300,), generator=torch.Generator().manual_seed(0))
    whole = prefill_logits(engine_for(tiny_hf, smollm_tokenizer), ids)
    monkeypatch.setattr(rotary, "FIRST_ROWS", 16)
    grown = engine_for(tiny_hf, smollm_tokenizer)
    assert grown.bundle.model.rotary.filled == 16
    torch.testing.assert_close(prefill_logits(grown, ids), whole, atol=0, rtol=0)
