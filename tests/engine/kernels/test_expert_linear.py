"""The mixture-of-experts linear (kernels/experts/): each row x[row_x[r]] @ W[row_expert[r]].T over
E experts stacked in block_pack's / float_pack's layout, within float32 rounding of a float64
reference, each row the bits block_linear / float_linear give it alone on its expert's weight, the
same on every ISA and in every batch, and an expert no row chose never read."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.engine.kernels.test_block_linear import activation_blocks, raw_tensor
from tests.support.gguf_blocks import SCALE_FIELDS, dequantized, random_blocks

E, N = 8, 32
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
KINDS = ["q4_k", "q6_k", "q5_0", "q2_k", "iq4_xs", "f16", "bf16", "f32"]
UNCHOSEN = [1, 4, 7]


def experts(cpp, kind: str, K: int, n: int = N, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """E random [n, K] experts: packed as the loader packs a stacked expert tensor (one spec of all
    E * n rows, viewed [E, n / 16, bytes]), and their float values [E, n, K]."""
    if kind in DTYPES:
        torch.manual_seed(seed)
        stored = torch.randn(E * n, K).to(DTYPES[kind])
        raw, values = stored.contiguous().view(torch.uint8).reshape(-1), stored.float()
    else:
        blocks = random_blocks(kind, E * n, K, seed=seed)
        raw, values = raw_tensor(blocks), torch.from_numpy(dequantized(kind, blocks, K))
    packed = cpp.pack_file_weights([([raw], K, kind, None)])[0]
    return packed.view(E, n // 16, -1), values.view(E, n, K)


def routing(tokens: int, top: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's `top` distinct experts, never one of UNCHOSEN (so many rows share each chosen expert), rows shuffled."""
    rng = np.random.default_rng(seed)
    chosen = [e for e in range(E) if e not in UNCHOSEN]
    picks = np.stack([rng.choice(chosen, size=top, replace=False) for _ in range(tokens)])
    row_x = np.repeat(np.arange(tokens), top)
    order = rng.permutation(len(row_x))  # rows in no particular order
    return torch.from_numpy(row_x[order].copy()), torch.from_numpy(picks.reshape(-1)[order].copy())


def one_linear(cpp, kind: str):
    return cpp.float_linear if kind in DTYPES else cpp.block_linear


@pytest.mark.parametrize("kind", KINDS)
def test_rows_match_a_float64_reference_and_the_single_expert_kernel_on_every_isa(cpp, kind, vector_isas):
    K = 512
    packed, values = experts(cpp, kind, K, seed=len(kind))
    row_x, row_expert = routing(tokens=9, top=2, seed=1)
    torch.manual_seed(2)
    x = torch.randn(9, K)
    w = values[row_expert].double()  # [R, N, K]: each row's expert, de-quantized
    # block kinds: over the row's int8 activation blocks, as block_linear's tests; float kinds: over x itself
    a = x[row_x].double() if kind in DTYPES else activation_blocks(x[row_x], SCALE_FIELDS[kind][0])
    exact, magnitude = torch.einsum("rk,rnk->rn", a, w), torch.einsum("rk,rnk->rn", a.abs(), w.abs())
    first = None
    for isa in vector_isas:
        out = cpp.expert_linear(x, row_x, row_expert, packed, N, kind, isa)
        assert out.shape == (len(row_x), N), isa
        assert ((out.double() - exact).abs() <= 1e-6 * magnitude + 1e-30).all(), isa
        if first is None:  # each row the bits of the one-weight kernel on its expert alone (on every ISA: see below)
            for r, (i, e) in enumerate(zip(row_x.tolist(), row_expert.tolist())):
                assert torch.equal(out[r], one_linear(cpp, kind)(x[i].unsqueeze(0), packed[e], N, kind, isa)[0]), (isa, r)
            first = out
        assert torch.equal(out, first), isa  # every ISA: the same bits


@pytest.mark.parametrize("kind", ["q6_k", "f16"])
def test_a_last_block_of_fewer_than_16_channels(cpp, kind, vector_isas):
    """N = 21: experts packed one by one (each padded to 2 blocks of 16) and stacked."""
    K, n = 256, 21
    pack = cpp.float_pack if kind in DTYPES else cpp.block_pack
    if kind in DTYPES:
        torch.manual_seed(3)
        rows = [torch.randn(n, K).half().contiguous().view(torch.uint8).reshape(-1) for _ in range(E)]
    else:
        rows = [raw_tensor(random_blocks(kind, n, K, seed=e)) for e in range(E)]
    packed = torch.stack([pack([r], K, kind) for r in rows])
    row_x, row_expert = routing(tokens=5, top=3, seed=4)
    x = torch.randn(5, K)
    out = cpp.expert_linear(x, row_x, row_expert, packed, n, kind)
    for r, (i, e) in enumerate(zip(row_x.tolist(), row_expert.tolist())):
        assert torch.equal(out[r], one_linear(cpp, kind)(x[i].unsqueeze(0), packed[e], n, kind)[0]), r
    for isa in vector_isas:
        assert torch.equal(cpp.expert_linear(x, row_x, row_expert, packed, n, kind, isa), out), isa


@pytest.mark.parametrize("kind", ["q4_k", "q5_0", "bf16"])
def test_each_row_is_bit_identical_alone_and_in_any_batch(cpp, kind, vector_isas):
    """30 tokens, top 3: experts with more rows than a pass holds (12; AVX2: 2)."""
    K = 256
    packed, _ = experts(cpp, kind, K, seed=5)
    row_x, row_expert = routing(tokens=30, top=3, seed=6)
    torch.manual_seed(7)
    x = torch.randn(30, K)
    for isa in vector_isas:
        whole = cpp.expert_linear(x, row_x, row_expert, packed, N, kind, isa)
        for r in (0, 7, 89):
            one = cpp.expert_linear(
                x[row_x[r]].unsqueeze(0), torch.zeros(1, dtype=torch.long), row_expert[r : r + 1], packed, N, kind, isa
            )
            assert torch.equal(one[0], whole[r]), (isa, r)
        shuffled = torch.randperm(len(row_x), generator=torch.Generator().manual_seed(8))
        again = cpp.expert_linear(x, row_x[shuffled], row_expert[shuffled], packed, N, kind, isa)
        assert torch.equal(again, whole[shuffled]), isa
        part = slice(10, 47)
        assert torch.equal(cpp.expert_linear(x, row_x[part], row_expert[part], packed, N, kind, isa), whole[part]), isa


@pytest.mark.parametrize("kind", ["q4_k", "q6_k", "q5_0", "f16", "f32"])
@pytest.mark.usefixtures("restore_prefetch")
def test_an_expert_no_row_chose_is_never_read(cpp, kind, vector_isas):
    """Its bytes all 0xFF (NaN scales or weights): every output stays finite and the same, prefetch on or off."""
    K = 256
    packed, _ = experts(cpp, kind, K, seed=9)
    row_x, row_expert = routing(tokens=6, top=2, seed=10)
    x = torch.randn(6, K)
    spoiled = packed.clone()
    spoiled[UNCHOSEN] = 0xFF
    assert not torch.isfinite(one_linear(cpp, kind)(x, spoiled[UNCHOSEN[0]], N, kind)).all()  # read, it would show
    for prefetch in (0, 512):
        cpp.set_weight_prefetch_bytes(prefetch)
        for isa in vector_isas:
            clean = cpp.expert_linear(x, row_x, row_expert, packed, N, kind, isa)
            out = cpp.expert_linear(x, row_x, row_expert, spoiled, N, kind, isa)
            assert torch.isfinite(out).all() and torch.equal(out, clean), (isa, prefetch)


def test_no_rows_give_an_empty_result(cpp):
    packed, _ = experts(cpp, "q4_k", 256)
    none = torch.zeros(0, dtype=torch.long)
    for x in (torch.randn(3, 256), torch.zeros(0, 256)):
        out = cpp.expert_linear(x, none, none, packed, N, "q4_k")
        assert out.shape == (0, N) and out.dtype == torch.float32


def test_rejects_what_it_cannot_compute(cpp):
    K = 256
    packed, _ = experts(cpp, "q4_k", K)
    x, rows = torch.randn(2, K), torch.tensor([0, 1])
    with pytest.raises(RuntimeError, match="outside the 8 experts"):
        cpp.expert_linear(x, rows, torch.tensor([0, 8]), packed, N, "q4_k")
    with pytest.raises(RuntimeError, match="outside the 8 experts"):
        cpp.expert_linear(x, rows, torch.tensor([-1, 0]), packed, N, "q4_k")
    with pytest.raises(RuntimeError, match="outside x's 2 rows"):
        cpp.expert_linear(x, torch.tensor([0, 2]), rows, packed, N, "q4_k")
    with pytest.raises(RuntimeError, match="one entry per output row"):
        cpp.expert_linear(x, rows, torch.tensor([0]), packed, N, "q4_k")
    with pytest.raises(RuntimeError, match="int64"):
        cpp.expert_linear(x, rows.int(), rows, packed, N, "q4_k")
    with pytest.raises(RuntimeError, match="packed: uint8 \\[E, 2, "):
        cpp.expert_linear(x, rows, rows, packed.view(E * 2, -1), N, "q4_k")  # not stacked by expert
    with pytest.raises(RuntimeError, match="packed"):
        cpp.expert_linear(x, rows, rows, packed, 48, "q4_k")  # 3 blocks an expert expected
    with pytest.raises(RuntimeError, match="packed"):
        cpp.expert_linear(x, rows, rows, packed, N, "q6_k")  # another type's block bytes
    with pytest.raises(RuntimeError, match="packed"):
        cpp.expert_linear(torch.randn(2, 512), rows, rows, packed, N, "q4_k")  # another K
    with pytest.raises(RuntimeError, match="whole blocks"):
        cpp.expert_linear(torch.randn(2, 100), rows, rows, packed, N, "q4_k")
    with pytest.raises(RuntimeError, match="group kernel"):
        cpp.expert_linear(x, rows, rows, packed, N, "q8_0")
    with pytest.raises(RuntimeError, match="AMX"):
        cpp.expert_linear(x, rows, rows, packed, N, "q4_k", "amx")


@pytest.mark.parametrize(("gate_up_kind", "down_kind", "gelu_tanh"), [("q4_k", "q6_k", False), ("q5_0", "q4_k", True)])
def test_the_whole_feed_forward_in_one_call_gives_the_linears_bits(cpp, gate_up_kind, down_kind, gelu_tanh, vector_isas):
    """expert_mlp: gate/up, act(gate) * up and down of each (token, choice) row, the bits of
    expert_linear, torch's activation and expert_linear again (as layers/experts.py computed them
    before), on every ISA; an unchosen expert never read; a token's rows the same in any batch."""
    import torch.nn.functional as F

    H, inner, tokens, top = 256, 256, 30, 3  # inner: the experts' intermediate width
    gate_up, _ = experts(cpp, gate_up_kind, H, n=2 * inner, seed=11)
    down, _ = experts(cpp, down_kind, inner, n=H, seed=12)
    rng = np.random.default_rng(13)
    chosen = [e for e in range(E) if e not in UNCHOSEN]
    ids = torch.from_numpy(np.stack([rng.choice(chosen, size=top, replace=False) for _ in range(tokens)]))
    torch.manual_seed(14)
    x = torch.randn(tokens, H)
    act = (lambda v: F.gelu(v, approximate="tanh")) if gelu_tanh else F.silu
    row_x, row_expert = torch.arange(tokens).repeat_interleave(top), ids.reshape(-1)
    spoiled_up, spoiled_down = gate_up.clone(), down.clone()
    spoiled_up[UNCHOSEN], spoiled_down[UNCHOSEN] = 0xFF, 0xFF
    for isa in vector_isas:
        gate, up = cpp.expert_linear(x, row_x, row_expert, gate_up, 2 * inner, gate_up_kind, isa).split(inner, dim=-1)
        expected = cpp.expert_linear(act(gate) * up, torch.arange(tokens * top), row_expert, down, H, down_kind, isa)
        out = cpp.expert_mlp(x, ids, spoiled_up, gate_up_kind, spoiled_down, down_kind, inner, gelu_tanh, isa)
        assert out.shape == (tokens * top, H) and torch.equal(out, expected), isa
        some = slice(4, 9)  # tokens 4..8 alone
        alone = cpp.expert_mlp(
            x[some].contiguous(), ids[some].contiguous(), gate_up, gate_up_kind, down, down_kind, inner, gelu_tanh, isa
        )
        assert torch.equal(alone, expected[4 * top : 9 * top]), isa
    with pytest.raises(RuntimeError, match="outside the 8 experts"):
        cpp.expert_mlp(x, torch.full((tokens, top), E), gate_up, gate_up_kind, down, down_kind, inner)
