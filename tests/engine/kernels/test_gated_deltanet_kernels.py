"""The Gated DeltaNet's C++ decode step (kernels/layers/gated_deltanet.cpp) against the layer's torch
form (layers/gated_deltanet.py, itself held to transformers' reference): outputs and both states
over many steps, rows scattered over a pool, grouped value heads in either order; each row's bits
independent of its batch; the other slots untouched; bad slots refused. And its prefill chunks'
convolution against transformers' over a prompt split anywhere, chunks shorter than the kernel included."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from inference.engine.layers.gated_deltanet import GatedDeltaNet

POOL, KERNEL = 9, 4


def layer(key_heads: int, value_heads: int, tiled: bool, seed: int = 0) -> GatedDeltaNet:
    cfg = SimpleNamespace(
        hidden_size=32,
        rms_norm_eps=0.05,  # large enough that the gated norm's eps shows in its output
        linear_num_key_heads=key_heads,
        linear_num_value_heads=value_heads,
        linear_key_head_dim=16,
        linear_value_head_dim=24,
        linear_conv_kernel_dim=KERNEL,
        gguf_tiled_value_heads=tiled,
    )
    net = GatedDeltaNet(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in net.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
        net.decay_rate.copy_(-torch.rand(value_heads, generator=gen) - 0.1)
    return net


def pools(net: GatedDeltaNet, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    (conv_rows, channels), (heads, dk, dv) = net.state_shapes
    return torch.randn(POOL, conv_rows, channels, generator=gen), torch.randn(POOL, heads, dk, dv, generator=gen) * 0.1


def step_inputs(net: GatedDeltaNet, rows: int, seed: int):
    projected = torch.randn(rows, sum(net.split), generator=torch.Generator().manual_seed(seed))
    return projected.split(net.split, dim=-1)


@pytest.mark.parametrize(("key_heads", "value_heads", "tiled"), [(2, 2, False), (2, 6, False), (2, 6, True)])
def test_steps_match_the_torch_form_with_the_pools_advanced_in_place(cpp, key_heads, value_heads, tiled):
    net = layer(key_heads, value_heads, tiled)
    slots = torch.tensor([7, 2, 4])
    ours, reference = pools(net), pools(net)
    untouched = [s for s in range(POOL) if s not in slots.tolist()]
    kept = [t[untouched].clone() for t in ours]
    for step in range(12):
        mixed, z, b, a = step_inputs(net, len(slots), seed=step)
        net._cpp = cpp
        out = net._decode_rows(mixed, z, b, a, *ours, slots)
        net._cpp = None
        expected = net._decode_rows(mixed, z, b, a, *reference, slots)
        torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(ours[0], reference[0], atol=1e-6, rtol=0)  # the conv windows are the inputs themselves
    torch.testing.assert_close(ours[1], reference[1], atol=2e-5, rtol=2e-5)
    assert all(torch.equal(t[untouched], k) for t, k in zip(ours, kept))


def test_a_rows_bits_do_not_depend_on_its_batch(cpp):
    net = layer(2, 6, True)
    net._cpp = cpp
    batch, alone = pools(net), pools(net)
    slots = torch.tensor([3, 0, 8, 5])
    for step in range(5):
        mixed, z, b, a = step_inputs(net, len(slots), seed=10 + step)
        together = net._decode_rows(mixed, z, b, a, *batch, slots)
        for i, slot in enumerate(slots.tolist()):
            one = slice(i, i + 1)
            single = net._decode_rows(mixed[one], z[one], b[one], a[one], *alone, torch.tensor([slot]))
            assert torch.equal(single[0], together[i])
    assert torch.equal(batch[0], alone[0]) and torch.equal(batch[1], alone[1])


def test_bad_slots_are_refused(cpp):
    net = layer(2, 2, False)
    net._cpp = cpp
    mixed, z, b, a = step_inputs(net, 2, seed=0)
    with pytest.raises(RuntimeError, match="share a state slot"):
        net._decode_rows(mixed, z, b, a, *pools(net), torch.tensor([1, 1]))
    with pytest.raises(RuntimeError, match="outside the pool"):
        net._decode_rows(mixed, z, b, a, *pools(net), torch.tensor([0, POOL]))


def test_prefill_convolution_split_anywhere_is_transformers_whole(cpp):
    from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_fn

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(50, 64, generator=gen)[:, :40]  # rows of a wider in_proj output, as the layer hands them
    weight = torch.randn(40, KERNEL, generator=gen)
    reference = causal_conv1d_fn(x.T.contiguous()[None], weight, None, activation="silu")[0].T
    state, parts = torch.zeros(KERNEL - 1, 40), []
    for start, end in [(0, 1), (1, 3), (3, 20), (20, 22), (22, 50)]:  # chunks of 1 and 2 rows: the state's rows carried
        parts.append(cpp.gated_deltanet_conv(x[start:end], weight, state))
        assert torch.equal(state, torch.cat([torch.zeros(KERNEL - 1, 40), x[:end]])[-(KERNEL - 1) :])  # the last inputs
    torch.testing.assert_close(torch.cat(parts), reference, atol=1e-5, rtol=1e-5)
