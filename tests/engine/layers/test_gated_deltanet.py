"""The Gated DeltaNet's two forms of the rule and its convolution (layers/gated_deltanet.py) against
transformers' own torch reference functions for Qwen3.5: the chunked form over a prompt longer than
a chunk (from a non-zero state), the one-token form step by step, the causal convolution across a
split with its carried state; grouped value heads included."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inference.engine.layers.gated_deltanet import causal_conv, chunked_delta_rule, conv_step, delta_rule_step, l2_normalized

HEADS, DK, DV, T = 4, 16, 24, 150


def inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, T, HEADS, DK, generator=gen), torch.randn(1, T, HEADS, DK, generator=gen)
    v = torch.randn(1, T, HEADS, DV, generator=gen)
    g = -F.softplus(torch.randn(1, T, HEADS, generator=gen))  # decays in (0, 1)
    beta = torch.rand(1, T, HEADS, generator=gen)
    state = torch.randn(1, HEADS, DK, DV, generator=gen) * 0.1
    return q, k, v, g, beta, state


def ours_qk(q, k):
    """What our layer hands the rule: L2-normalised, q scaled by 1/sqrt(dk), heads first."""
    return (l2_normalized(q[0]) * DK**-0.5).transpose(0, 1), l2_normalized(k[0]).transpose(0, 1)


def test_the_chunked_form_is_transformers_from_a_carried_state():
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    q, k, v, g, beta, state = inputs()
    ref_out, ref_state = torch_chunk_gated_delta_rule(
        q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    oq, ok = ours_qk(q, k)
    out, final = chunked_delta_rule(oq, ok, v[0].transpose(0, 1), g[0].T, beta[0].T, state[0].clone())
    torch.testing.assert_close(out.transpose(0, 1), ref_out[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(final, ref_state[0], atol=1e-4, rtol=1e-4)


def test_the_one_token_form_step_by_step_is_transformers_recurrence():
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule

    q, k, v, g, beta, state = inputs(1)
    ref_out, ref_state = torch_recurrent_gated_delta_rule(
        q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    oq, ok = ours_qk(q, k)
    current = state.clone()
    for t in range(T):  # a batch of one sequence, one token a step
        out, current = delta_rule_step(oq[None, :, t], ok[None, :, t], v[:, t], g[:, t], beta[:, t], current)
        torch.testing.assert_close(out[0], ref_out[0, t], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(current, ref_state, atol=1e-4, rtol=1e-4)


def test_the_convolution_split_anywhere_carries_its_state_as_transformers_whole():
    from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_fn

    gen = torch.Generator().manual_seed(2)
    x, weight = torch.randn(40, 12, generator=gen), torch.randn(12, 4, generator=gen)
    reference = causal_conv1d_fn(x.T[None], weight, None, activation="silu")[0].T
    first, state = causal_conv(x[:17], weight, torch.zeros(3, 12))
    second, state = causal_conv(x[17:30], weight, state)
    steps = []
    for row in x[30:]:
        out, step_state = conv_step(row[None], weight, state[None])
        steps.append(out[0])
        state = step_state[0]
    torch.testing.assert_close(torch.cat([first, second, torch.stack(steps)]), reference, atol=1e-5, rtol=1e-5)
