"""Sampler behaviour: filters, penalties, greedy, seeds and logprobs on plain tensors."""

import math

import pytest
import torch

from inference.engine.sample.sampler import (
    Sampler,
    SamplingContext,
    apply_min_tokens,
    apply_penalties,
    filtered_logits,
    keep_mask,
    make_generator,
)
from inference.engine.sample.sampling_params import SamplingParams

EOS = 2


def ctx(prompt=(), output=(), eos=(EOS,), **params) -> SamplingContext:
    p = SamplingParams(max_tokens=64, **params)
    return SamplingContext(
        params=p,
        prompt_token_ids=list(prompt),
        output_token_ids=list(output),
        generator=make_generator(p.seed, "cpu"),
        eos_token_ids=set(eos),
    )


def logits_from_probs(probs) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float32).log().unsqueeze(0)


sampler = Sampler()


# --- greedy -------------------------------------------------------------------------------


def test_greedy_is_argmax_on_fast_path():
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    out = sampler(logits, [ctx(temperature=0.0) for _ in range(5)])
    assert out.token_ids == logits.argmax(-1).tolist()
    assert out.logprobs == [None] * 5


def test_greedy_ties_go_to_the_first_maximum_on_the_fast_path():
    """The fast path picks the first of equal maxima, as argmax does (and the other paths)."""
    logits = torch.zeros(3, 49152)
    logits[:, [7, 40000]] = 5.0
    logits[1, 3] = 5.0
    fast = sampler(logits, [ctx(temperature=0.0) for _ in range(3)]).token_ids
    assert fast == [7, 3, 7] == logits.argmax(-1).tolist()


def test_greedy_rows_unaffected_by_other_rows():
    logits = torch.randn(6, 500, generator=torch.Generator().manual_seed(1))
    contexts = [
        ctx(temperature=0.0),
        ctx(temperature=1.3, top_k=5, seed=3),
        ctx(temperature=0.0),
        ctx(temperature=0.7, top_p=0.5, min_p=0.1, presence_penalty=1.0, output=[1, 2, 3]),
        ctx(temperature=2.0, repetition_penalty=1.5, prompt=[4, 5]),
        ctx(temperature=0.0),
    ]
    out = sampler(logits, contexts)
    expected = logits.argmax(-1).tolist()
    for row in (0, 2, 5):
        assert out.token_ids[row] == expected[row]


def test_greedy_with_penalty_is_argmax_of_penalized_logits():
    logits = torch.tensor([[5.0, 4.0, 1.0, 0.0]])
    out = sampler(logits, [ctx(temperature=0.0, repetition_penalty=2.0, prompt=[0])])
    assert out.token_ids == [1]  # 5/2 = 2.5 < 4


def test_bfloat16_logits():
    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(2)).bfloat16()
    out = sampler(logits, [ctx(temperature=0.0), ctx(seed=1), ctx(temperature=0.0, frequency_penalty=0.5, output=[1])])
    assert out.token_ids[0] == logits[0].float().argmax().item()
    assert all(0 <= t < 100 for t in out.token_ids)


# --- filters ------------------------------------------------------------------------------


def test_top_k_keeps_exactly_the_k_largest():
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(4))
    mask = keep_mask(x, [ctx(top_k=7), ctx(top_k=0), ctx(top_k=-1)])
    assert set(mask[0].nonzero().flatten().tolist()) == set(x[0].topk(7).indices.tolist())
    assert mask[1].all() and mask[2].all()


def test_top_k_draws_stay_in_top_k():
    logits = torch.randn(1, 200, generator=torch.Generator().manual_seed(5))
    allowed = set(logits[0].topk(3).indices.tolist())
    c = ctx(top_k=3, temperature=1.5, seed=9)
    seen = {sampler(logits, [c]).token_ids[0] for _ in range(200)}
    assert seen == allowed


@pytest.mark.parametrize(
    "top_p,kept",
    [(0.45, {0}), (0.6, {0, 1}), (0.9, {0, 1, 2}), (0.99, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3})],
)
def test_top_p_keeps_smallest_set_reaching_p(top_p, kept):
    x = logits_from_probs([0.5, 0.3, 0.15, 0.05])
    mask = keep_mask(x, [ctx(top_p=top_p)])
    assert set(mask[0].nonzero().flatten().tolist()) == kept


def test_top_p_applies_after_top_k_renormalisation():
    # top-k 2 leaves 0.5/0.8 and 0.3/0.8 = 0.625 / 0.375; top_p 0.6 then keeps only token 0.
    x = logits_from_probs([0.5, 0.3, 0.15, 0.05])
    mask = keep_mask(x, [ctx(top_k=2, top_p=0.6)])
    assert mask[0].tolist() == [True, False, False, False]


def test_top_p_row_off_is_untouched_by_neighbours():
    x = torch.randn(2, 50_000, generator=torch.Generator().manual_seed(6)) * 8
    mask = keep_mask(x, [ctx(top_p=0.5), ctx(top_p=1.0)])
    assert mask[1].all()
    assert not mask[0].all()


def reference_top_p(row: torch.Tensor, p: float) -> set[int]:
    probs, order = torch.softmax(row.double(), -1).sort(descending=True)
    n = int((probs.cumsum(-1) < p).sum()) + 1
    return set(order[:n].tolist())


def test_top_p_wide_and_narrow_nucleus_match_full_sort_reference():
    # Row 0 is nearly flat: its nucleus spans most of the vocabulary (beyond the sorted candidates).
    g = torch.Generator().manual_seed(11)
    x = torch.stack([torch.randn(8000, generator=g) * 0.1, torch.randn(8000, generator=g) * 6])
    mask = keep_mask(x, [ctx(top_p=0.9), ctx(top_p=0.9)])
    for row in range(2):
        got = set(mask[row].nonzero().flatten().tolist())
        want = reference_top_p(x[row], 0.9)
        assert len(got ^ want) <= 1  # float32 vs float64 may disagree on the last token only
    assert mask[0].sum() > 5000 and mask[1].sum() < 1024


def test_min_p_threshold_relative_to_top_token():
    x = logits_from_probs([0.5, 0.3, 0.15, 0.05])
    kept = filtered_logits(x.expand(3, -1), [ctx(min_p=0.2), ctx(min_p=0.7), ctx(min_p=0.2, temperature=3.0)]).isfinite()
    assert kept[0].tolist() == [True, True, True, False]  # threshold 0.5 * 0.2 = 0.1
    assert kept[1].tolist() == [True, False, False, False]  # threshold 0.35
    # Temperature flattens the distribution first: 0.05 ** (1/3) / 0.5 ** (1/3) > 0.2
    assert kept[2].all()


def test_sampling_follows_the_distribution():
    probs = [0.5, 0.3, 0.15, 0.05]
    n = 4000
    logits = logits_from_probs(probs).expand(n, -1)
    out = sampler(logits, [ctx() for _ in range(n)])
    counts = torch.bincount(torch.tensor(out.token_ids), minlength=4).float() / n
    assert torch.allclose(counts, torch.tensor(probs), atol=0.03)


def test_temperature_sharpens():
    logits = logits_from_probs([0.4, 0.35, 0.25]).expand(3000, -1)
    cold = sampler(logits, [ctx(temperature=0.1) for _ in range(3000)]).token_ids
    assert cold.count(0) / 3000 > 0.7


# --- penalties ----------------------------------------------------------------------------


def test_repetition_penalty_hf_semantics():
    x = torch.tensor([[2.0, -2.0, 3.0, -1.0, 4.0]])
    apply_penalties(x, [ctx(repetition_penalty=2.0, prompt=[0], output=[1, 1])])
    assert x.tolist() == [[1.0, -4.0, 3.0, -1.0, 4.0]]


def test_frequency_and_presence_penalties_over_output_only():
    x = torch.zeros(1, 6)
    apply_penalties(x, [ctx(frequency_penalty=0.5, presence_penalty=0.25, prompt=[0, 4], output=[3, 3, 5])])
    assert x.tolist() == [[0.0, 0.0, 0.0, -(2 * 0.5 + 0.25), 0.0, -(0.5 + 0.25)]]


def test_penalties_are_per_row():
    x = torch.zeros(3, 4)
    apply_penalties(
        x,
        [
            ctx(frequency_penalty=1.0, output=[1]),
            ctx(output=[1]),
            ctx(presence_penalty=-1.0, output=[2, 2]),
        ],
    )
    assert x.tolist() == [[0, -1, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]


def test_caller_logits_are_not_modified():
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(12))
    before = logits.clone()
    sampler(
        logits,
        [
            ctx(repetition_penalty=2.0, prompt=[1, 2], min_tokens=3, top_k=3),
            ctx(temperature=0.0, presence_penalty=1.0, output=[4]),
        ],
    )
    assert torch.equal(logits, before)


def test_min_tokens_masks_eos_and_stop_token_ids():
    x = torch.zeros(3, 6)
    apply_min_tokens(
        x,
        [
            ctx(min_tokens=2, output=[1], stop_token_ids=[4]),
            ctx(min_tokens=2, output=[1, 1], stop_token_ids=[4]),
            ctx(output=[]),
        ],
    )
    inf = float("-inf")
    assert x.tolist() == [[0, 0, inf, 0, inf, 0], [0] * 6, [0] * 6]


def test_min_tokens_prevents_greedy_eos_and_ignore_eos_does_not_mask():
    logits = torch.tensor([[0.0, 1.0, 9.0, 0.5]] * 3)
    out = sampler(
        logits,
        [
            ctx(temperature=0.0, min_tokens=1),
            ctx(temperature=0.0, min_tokens=1, output=[1]),
            ctx(temperature=0.0, ignore_eos=True),
        ],
    )
    assert out.token_ids == [1, EOS, EOS]


# --- seeds --------------------------------------------------------------------------------


def run_steps(make_batch, row, steps_logits):
    """Feed fixed logits for each step; return the tokens chosen at `row`."""
    contexts = make_batch()
    tokens = []
    for logits in steps_logits:
        out = sampler(logits.expand(len(contexts), -1).clone(), contexts)
        tokens.append(out.token_ids[row])
        for c, t in zip(contexts, out.token_ids):
            c.output_token_ids.append(t)
    return tokens


def test_seed_reproducible_across_batch_composition_and_position():
    g = torch.Generator().manual_seed(7)
    steps = [torch.randn(1, 2000, generator=g) * 3 for _ in range(20)]
    target = dict(seed=1234, temperature=0.9, top_k=200, top_p=0.95, frequency_penalty=0.3)

    alone = run_steps(lambda: [ctx(**target)], 0, steps)
    # The neighbours change which code paths run (e.g. a flat top-p row forces a full sort).
    last = run_steps(
        lambda: [ctx(), ctx(seed=5, top_p=0.3), ctx(temperature=0.0), ctx(temperature=5.0, top_p=0.99), ctx(**target)], 4, steps
    )
    first = run_steps(lambda: [ctx(**target), ctx(min_p=0.2, repetition_penalty=1.3), ctx(seed=99)], 0, steps)
    assert alone == last == first
    assert len(set(alone)) > 5  # really sampled, not stuck on one token


def test_different_seeds_differ_and_unseeded_rows_vary():
    g = torch.Generator().manual_seed(8)
    steps = [torch.randn(1, 2000, generator=g) for _ in range(20)]
    a = run_steps(lambda: [ctx(seed=1)], 0, steps)
    b = run_steps(lambda: [ctx(seed=2)], 0, steps)
    assert a != b
    assert run_steps(lambda: [ctx()], 0, steps) != run_steps(lambda: [ctx()], 0, steps)


def test_make_generator():
    assert make_generator(None, "cpu") is None
    g1, g2 = make_generator(-3, "cpu"), make_generator(-3, "cpu")
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


# --- logprobs -----------------------------------------------------------------------------


def test_logprobs_are_raw_log_softmax_with_sorted_top_n():
    logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(9))
    contexts = [
        ctx(logprobs=5, temperature=0.5, top_k=3, repetition_penalty=1.7, prompt=[1, 2], seed=1),
        ctx(),
        ctx(logprobs=0, temperature=0.0),
    ]
    out = sampler(logits, contexts)
    ref = torch.log_softmax(logits, dim=-1)
    assert out.logprobs[1] is None

    lp = out.logprobs[0]
    assert lp.token_id == out.token_ids[0] and lp.token == ""
    assert math.isclose(lp.logprob, ref[0, lp.token_id].item(), rel_tol=1e-5, abs_tol=1e-6)
    assert [t for t, _, _ in lp.top] == ref[0].topk(5).indices.tolist()
    values = [v for _, _, v in lp.top]
    assert values == sorted(values, reverse=True)
    assert all(math.isclose(v, ref[0, t].item(), rel_tol=1e-5, abs_tol=1e-6) for t, _, v in lp.top)

    greedy_lp = out.logprobs[2]
    assert greedy_lp.top == [] and greedy_lp.token_id == logits[2].argmax().item()
    assert math.isclose(greedy_lp.logprob, ref[2].max().item(), rel_tol=1e-5, abs_tol=1e-6)


def test_logprobs_on_greedy_fast_path():
    logits = torch.randn(2, 100, generator=torch.Generator().manual_seed(10))
    out = sampler(logits, [ctx(temperature=0.0, logprobs=20), ctx(temperature=0.0)])
    assert len(out.logprobs[0].top) == 20 and out.logprobs[1] is None
    assert out.logprobs[0].top[0][0] == out.token_ids[0]


# --- logit_bias ---------------------------------------------------------------------------


def test_logit_bias_forces_and_bans_tokens_even_under_greedy():
    logits = torch.randn(3, 400, generator=torch.Generator().manual_seed(7))
    top = logits.argmax(-1).tolist()
    rows = [
        ctx(temperature=0.0, logit_bias={123: 100.0}),
        ctx(temperature=0.0, logit_bias={top[1]: -100.0}),
        ctx(temperature=0.0),
    ]
    out = sampler(logits, rows)
    assert out.token_ids[0] == 123
    assert out.token_ids[1] != top[1] and out.token_ids[1] == logits[1].topk(2).indices[1].item()
    assert out.token_ids[2] == top[2]  # a row without a bias is untouched by its neighbours'
    drawn = sampler(logits[:1], [ctx(temperature=1.0, seed=3, logit_bias={5: 100.0})])
    assert drawn.token_ids == [5]


def test_logit_bias_leaves_logprobs_raw():
    """Logprobs are the model's, before any processing (vLLM's default), bias included."""
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(2))
    out = sampler(logits, [ctx(temperature=0.0, logprobs=0, logit_bias={9: 100.0})])
    assert out.token_ids == [9]
    assert out.logprobs[0].logprob == pytest.approx(torch.log_softmax(logits[0], -1)[9].item())
