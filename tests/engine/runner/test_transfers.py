"""The step's host/device traffic (engine/runner/transfers.py) and the counter that checks it: on the CPU
both are plain calls, so what is tested here is that values survive the round trip and that the
counter trips on every call that would make a GPU's host wait."""

from __future__ import annotations

import torch

from inference.engine.runner.transfers import fetch, tensor_to_device, to_device
from tests.support.host_syncs import HostSyncCounter

CPU = torch.device("cpu")


def test_fetch_brings_several_tensors_back_in_one_transfer_with_their_values_and_shapes():
    tokens = torch.tensor([5, 49151, 2**40 + 3])
    logprobs = torch.tensor([-0.125, -3.5, -17.0625], dtype=torch.float32)
    top = torch.tensor([[1, 2], [3, 4]])
    with HostSyncCounter() as syncs:
        got_tokens, got_logprobs, got_top = fetch(tokens, logprobs, top)
    assert syncs.events == ["tolist"]
    assert got_tokens == [5, 49151, 2**40 + 3] and all(type(t) is int for t in got_tokens)
    assert got_logprobs == logprobs.tolist()
    assert got_top == [[1, 2], [3, 4]]


def test_host_values_reach_the_device_without_a_counted_wait():
    with HostSyncCounter() as syncs:
        values = to_device([[1, 2], [3, 4]], torch.long, CPU)
        mask = tensor_to_device(torch.tensor([True, False]), CPU)
    assert syncs.events == []
    assert values.tolist() == [[1, 2], [3, 4]] and mask.tolist() == [True, False]


def test_the_counter_trips_on_each_kind_of_wait():
    x = torch.arange(6.0)
    with HostSyncCounter() as syncs:
        x.sum().item()
        x.tolist()
        bool(x[0] > 1)
        int(x[1])
        x[[0, 2]]
        torch.tensor([1, 2], device="cpu")
        x.to("cpu")
        x.to(torch.float16)  # a dtype, not a device: no wait
        x.to("cpu", non_blocking=True)
        x[torch.tensor([0, 2])]  # an index tensor: no wait
    assert syncs.events == ["item", "tolist", "bool", "int", "list index", "torch.tensor(device=)", "blocking .to(device)"]
