"""Models built without random initialisation: the checkpoint sets every weight afterwards."""

from __future__ import annotations

import torch
from torch import nn

from inference.engine.models.no_init import WithoutWeightInit


def test_no_init_function_runs_and_everything_else_does():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    with WithoutWeightInit():
        linear = nn.Linear(64, 32)
        embedding = nn.Embedding(100, 16)
        ones = torch.ones(3)
        drawn = nn.init.normal_(torch.zeros(4))
    assert torch.equal(torch.get_rng_state(), state)  # nothing random was drawn
    assert torch.equal(drawn, torch.zeros(4)) and torch.equal(ones, torch.ones(3))
    assert linear.weight.shape == (32, 64) and embedding.weight.shape == (100, 16)
    nn.init.normal_(torch.zeros(4))  # outside the block initialisation works again
    assert not torch.equal(torch.get_rng_state(), state)
