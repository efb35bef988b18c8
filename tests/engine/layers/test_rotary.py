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
    embedding.ensure(70_001)  # what the model runner does with a step's furthest position
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


def test_an_engine_serving_past_the_first_rows_gives_the_same_tokens_as_one_computed_whole(
    monkeypatch, tiny_hf, smollm_tokenizer
):
    """A prompt longer than FIRST_ROWS, chunked, then decodes past it: the model runner fills the
    rows each step reaches before the step reads them."""
    from tests.support.engine_helpers import engine_for, generated_ids, greedy, run_to_completion

    ids = torch.randint(3, 49152, (300,), generator=torch.Generator().manual_seed(0)).tolist()
    answers = []
    for first_rows in (rotary.FIRST_ROWS, 16):
        monkeypatch.setattr(rotary, "FIRST_ROWS", first_rows)
        engine = engine_for(tiny_hf, smollm_tokenizer, max_num_batched_tokens=64)
        assert engine.bundle.model.rotary.filled == min(first_rows, engine.bundle.model.rotary.max_positions)
        engine.add_request("r", ids, greedy(12, logprobs=2))
        outputs = run_to_completion(engine)["r"]
        answers.append((generated_ids(outputs), [lp.top for out in outputs for lp in out.logprobs or []]))
    assert engine.bundle.model.rotary.filled >= 312
    assert answers[0] == answers[1]
