"""Gated DeltaNet: the linear-attention layer of hybrid models (Qwen3.5's three of every four layers).

Instead of a growing KV cache, each sequence carries a fixed-size state per layer: the last
`kernel - 1` inputs of a short causal convolution over Q/K/V, and a float32 matrix per value
head (key dim x value dim) that the gated delta rule updates token by token:

    S <- S * exp(g);  S <- S + k (beta (v - S^T k))^T;  out = S^T q

with q and k L2-normalised (q also scaled by 1/sqrt(key dim)), g = -exp(A_log) softplus(a + dt_bias)
the per-head decay (-exp(A_log) kept as `decay_rate`, as llama.cpp's files store it) and
beta = sigmoid(b) the per-head write strength. Each key head serves several value heads: the
consecutive ones in transformers' order, every `key heads`-th one in llama.cpp's (`tiled_heads`). The output goes through an
RMSNorm gated by silu(z) and the output projection.

Two forms compute the rule. A decode step (one token per sequence) runs the recurrence once for
every decoding row: on CPU one C++ call per layer (kernels/layers/gated_deltanet.cpp: convolution,
rule and gated norm, each row's slot of the state pools read and written in place), elsewhere torch's
batched products over the states gathered by slot. Speculative verifications step their rows the same
way, so a verified token is the token a plain decode would have made. A prefill chunk runs the chunked form: within chunks of 64
tokens the updates are condensed into triangular solves and matmuls (the UT transform of the
DeltaNet papers), and the state is carried from chunk to chunk. The torch forms are held to
transformers' reference (tests/engine/layers/test_gated_deltanet.py), the C++ ones to the torch
forms (tests/engine/kernels/test_gated_deltanet_kernels.py).

Where the states live is the runner's business (kv_cache/recurrent_state.py): a layer is handed its
(conv, recurrent) state tensors, one row per state slot, and the step's `meta.state` says which slot
each sequence reads and writes, whether it starts from zeros, and where a prefill chunk keeps a copy
of its state (a prefix checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .cpu_kernels import cpu_kernels_for

CHUNK = 64


@dataclass
class StateMetadata:
    """One step's recurrent-state addressing, shared by every linear layer."""

    decode_slots: torch.Tensor | None  # [plain decodes] the state slot of each plain decode row's sequence
    prefill_slots: list[int]  # per prefill chunk (the step's order), its sequence's slot
    prefill_fresh: list[bool]  # per prefill chunk: starts at position 0 (the state starts from zeros)
    # per prefill chunk: (rows, row) pairs: copy the state into state row `row` after the chunk's first `rows`
    prefill_checkpoints: list[list[tuple[int, int]]] = field(default_factory=list)
    # verifications (after the plain decodes): (slot, rows); their rows read the slot's state but
    # leave it as it was, keeping their inputs in `replay_inputs` until the accepted ones are replayed
    verifies: list[tuple[int, int]] = field(default_factory=list)
    replay_inputs: dict = field(default_factory=dict)  # (layer, slot) -> the verification's in_proj outputs


def l2_normalized(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (the reference's form, not F.normalize's)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def causal_conv(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal convolution of one sequence's chunk, then SiLU. x: [T, C]; weight: [C, K];
    state: [K-1, C], the inputs before the chunk (zeros at the start). Returns (out [T, C], the new
    state: the last K-1 inputs)."""
    kernel = weight.shape[1]
    padded = torch.cat([state.to(x.dtype), x], dim=0)  # [K-1+T, C]
    windows = padded.unfold(0, kernel, 1)  # [T, C, K]
    out = torch.einsum("tck,ck->tc", windows, weight)
    return F.silu(out), padded[-(kernel - 1) :]


def conv_step(x: torch.Tensor, weight: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token for each of B sequences. x: [B, C]; states: [B, K-1, C]. Returns (out [B, C], new states)."""
    padded = torch.cat([states.to(x.dtype), x[:, None]], dim=1)  # [B, K, C]
    out = torch.einsum("bkc,ck->bc", padded, weight)
    return F.silu(out), padded[:, 1:]


def delta_rule_step(q, k, v, g, beta, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence for one token of each of B sequences, in float32. q, k: [B, H, dk] (normalised,
    q scaled); v: [B, H, dv]; g, beta: [B, H]; state: [B, H, dk, dv]. Returns (out [B, H, dv], new state).
    As batched matrix products over (sequence, head), the decay folded into the read and the write
    added in place: three passes over the states where the elementwise form made six (~3x at 32 rows)."""
    batch, heads, dk, dv = state.shape
    decay = g.exp()
    flat = state.reshape(batch * heads, dk, dv)
    remembered = torch.bmm(k.reshape(batch * heads, 1, dk), flat).view(batch, heads, dv) * decay[..., None]
    delta = (v - remembered) * beta[..., None]
    new = flat * decay.reshape(batch * heads, 1, 1)
    new.baddbmm_(k.reshape(batch * heads, dk, 1), delta.reshape(batch * heads, 1, dv))
    out = torch.bmm(q.reshape(batch * heads, 1, dk), new).view(batch, heads, dv)
    return out, new.view(batch, heads, dk, dv)


def chunked_delta_rule(q, k, v, g, beta, state: torch.Tensor, chunk: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule over one sequence's T tokens, in float32, a chunk at a time. q, k: [H, T, dk]
    (normalised, q scaled); v: [H, T, dv]; g, beta: [H, T]; state: [H, dk, dv]. Returns
    (out [H, T, dv], the state after the last token)."""
    heads, length, _ = q.shape
    out = torch.empty(heads, length, v.shape[-1], dtype=torch.float32, device=q.device)
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        qc, kc, vc, gc, bc = q[:, start:end], k[:, start:end], v[:, start:end], g[:, start:end], beta[:, start:end]
        n = end - start
        decay = gc.cumsum(-1)  # [H, n]: log of the decay from the chunk's start to each position
        lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        pairwise = (decay[:, :, None] - decay[:, None, :]).masked_fill(~lower, float("-inf")).exp()  # [H, n, n]
        k_beta = kc * bc[..., None]
        # (I + strictly-lower(k_beta k^T * pairwise)) X = ...: each write corrected by the writes before it
        system = ((k_beta @ kc.transpose(-1, -2)) * pairwise).tril(-1)
        system = system + torch.eye(n, dtype=system.dtype, device=system.device)
        values = torch.linalg.solve_triangular(system, vc * bc[..., None], upper=False, unitriangular=True)
        keys_read = torch.linalg.solve_triangular(system, k_beta * decay.exp()[..., None], upper=False, unitriangular=True)
        new_values = values - keys_read @ state  # what the state before the chunk does not already predict
        attention = (qc @ kc.transpose(-1, -2)) * pairwise
        out[:, start:end] = (qc * decay.exp()[..., None]) @ state + attention @ new_values
        last = decay[:, -1:]  # [H, 1]
        state = state * last.exp()[..., None] + (kc * (last - decay).exp()[..., None]).transpose(-1, -2) @ new_values
    return out, state


class GatedRMSNorm(nn.Module):
    """RMSNorm over each value head, times silu(z): in float32, the result in x's dtype."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype) * self.weight
        return (normed * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(nn.Module):
    """The layer: one fused input projection (Q/K/V, z, b, a), the causal convolution, the rule,
    the gated norm and the output projection. `state`: this layer's (conv, recurrent) tensors,
    [slots, K-1, conv channels] and [slots, value heads, key dim, value dim]."""

    def __init__(self, cfg):
        super().__init__()
        self.num_k_heads, self.num_v_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.kernel = cfg.linear_conv_kernel_dim
        self.split = [self.conv_dim, self.value_dim, self.num_v_heads, self.num_v_heads]  # qkv, z, b, a
        self.in_proj = nn.Linear(cfg.hidden_size, sum(self.split), bias=False)
        self.conv_weight = nn.Parameter(torch.zeros(self.conv_dim, self.kernel))
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.decay_rate = nn.Parameter(-torch.ones(self.num_v_heads))  # -exp(A_log)
        self.tiled_heads = bool(getattr(cfg, "gguf_tiled_value_heads", False))
        self.norm = GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, cfg.hidden_size, bias=False)
        self._cpp = None  # the kernels, once bind_kernels found they apply

    @property
    def state_shapes(self) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """One sequence's conv state and recurrent state."""
        return (self.kernel - 1, self.conv_dim), (self.num_v_heads, self.head_k_dim, self.head_v_dim)

    def bind_kernels(self, device: torch.device, dtype: torch.dtype) -> None:
        """At load: decode rows through the C++ step (kernels/layers/gated_deltanet.cpp) where it runs."""
        self._cpp = cpu_kernels_for(device, dtype)

    def forward(self, x: torch.Tensor, state, meta) -> torch.Tensor:
        conv_states, rec_states = state
        projected = self.in_proj(x)
        mixed, z, b, a = projected.split(self.split, dim=-1)
        normed = torch.empty(x.shape[0], self.value_dim, dtype=x.dtype, device=x.device)
        info = meta.state
        plain = 0 if info.decode_slots is None else len(info.decode_slots)
        if plain:
            rows = slice(0, plain)
            normed[rows] = self._decode_rows(mixed[rows], z[rows], b[rows], a[rows], conv_states, rec_states, info.decode_slots)
        row = plain
        for slot, count in info.verifies:
            rows = slice(row, row + count)
            row += count
            kept = projected[rows].clone()
            normed[rows] = self._steps(kept, conv_states[slot], rec_states[slot])[0]
            info.replay_inputs[(self, slot)] = kept
        checkpoints = info.prefill_checkpoints or [[]] * len(meta.prefills)
        weight = self.conv_weight.to(x.dtype)
        for chunk, slot, fresh, kept in zip(meta.prefills, info.prefill_slots, info.prefill_fresh, checkpoints):
            if fresh:
                conv_states[slot].zero_()
                rec_states[slot].zero_()
            out = torch.empty(chunk.end - chunk.start, self.num_v_heads, self.head_v_dim, dtype=torch.float32, device=x.device)
            start = chunk.start
            for end, kept_row in [*((chunk.start + rows, row) for rows, row in kept), (chunk.end, None)]:
                if end > start:
                    rows = slice(start, end)
                    conv_out = self._conv(mixed[rows], weight, conv_states, slot)
                    q, k, v = (t.transpose(0, 1) for t in self._heads(conv_out))
                    g, beta = self._decay(a[rows]).T, b[rows].float().sigmoid().T
                    part, rec_states[slot] = chunked_delta_rule(q, k, v, g, beta, rec_states[slot])
                    out[start - chunk.start : end - chunk.start] = part.transpose(0, 1)
                    start = end
                if kept_row is not None:  # a prefix checkpoint: the state after the chunk's rows so far
                    conv_states[kept_row], rec_states[kept_row] = conv_states[slot], rec_states[slot]
            rows = slice(chunk.start, chunk.end)
            normed[rows] = self._gated_norm(out, z[rows])
        return self.out_proj(normed)

    def _decode_rows(self, mixed, z, b, a, conv_states, rec_states, slots: torch.Tensor) -> torch.Tensor:
        """One token for each row, its slot's states (rows of the pools) advanced in place: the
        rule's output under the gated norm, [rows, value dim]. The C++ step where it runs, else torch's
        (the CUDA path): the states gathered by slot, stepped and put back."""
        if self._cpp is not None:
            return self._cpp.gated_deltanet_decode(
                mixed,
                z,
                b,
                a,
                self.conv_weight.contiguous(),
                self.dt_bias.contiguous(),
                self.decay_rate.contiguous(),
                self.norm.weight.contiguous(),
                self.norm.eps,
                conv_states,
                rec_states,
                slots,
                self.num_k_heads,
                self.tiled_heads,
            )
        conv_out, conv_states[slots] = conv_step(mixed, self.conv_weight.to(mixed.dtype), conv_states[slots])
        q, k, v = self._heads(conv_out)
        out, rec_states[slots] = delta_rule_step(q, k, v, self._decay(a), b.float().sigmoid(), rec_states[slots])
        return self._gated_norm(out, z)

    def _conv(self, mixed: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor, slot: int) -> torch.Tensor:
        """A prefill chunk's convolution (then SiLU), its slot's conv state carried in place: in C++
        where it runs (torch's took ~20x its arithmetic), else causal_conv."""
        if self._cpp is not None:
            return self._cpp.gated_deltanet_conv(mixed, weight.contiguous(), conv_states[slot])
        out, conv_states[slot] = causal_conv(mixed, weight, conv_states[slot])
        return out

    def _decay(self, a: torch.Tensor) -> torch.Tensor:
        """g, the log of each row's per-head decay: -exp(A_log) softplus(a + dt_bias), float32."""
        return self.decay_rate.float() * F.softplus(a.float() + self.dt_bias.float())

    def _gated_norm(self, out: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """[rows, value heads, value dim] float32 -> [rows, value dim] in z's dtype, each head normed and gated."""
        rows = out.shape[0]
        return self.norm(out.to(z.dtype).reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim)).reshape(
            rows, self.value_dim
        )

    def _steps(self, projected, conv_state, rec_state):
        """One sequence's rows (their in_proj outputs) one token at a time, as decode steps compute
        them, from copies of its states: (normed outputs [rows, value dim], conv state, recurrent
        state) after the last row."""
        conv_pool, rec_pool = conv_state[None].clone(), rec_state[None].clone()
        slot = torch.zeros(1, dtype=torch.long, device=projected.device)
        outs = []
        for i in range(projected.shape[0]):
            mixed, z, b, a = projected[i : i + 1].split(self.split, dim=-1)
            outs.append(self._decode_rows(mixed, z, b, a, conv_pool, rec_pool, slot))
        return torch.cat(outs), conv_pool[0], rec_pool[0]

    def replay(self, state, slot: int, rows: int, projected) -> None:
        """After a verification: the slot's state advanced over its first `rows` rows, the ones
        accepted (and the token before them), as if the rejected guesses had never been computed."""
        conv_states, rec_states = state
        _, conv_states[slot], rec_states[slot] = self._steps(projected[:rows], conv_states[slot], rec_states[slot])

    def _heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[rows, conv channels] -> q, k [rows, value heads, key dim] (normalised, q scaled; each key
        head serves num_v / num_k value heads) and v [rows, value heads, value dim], float32."""
        rows = mixed.shape[0]
        q, k, v = mixed.float().split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        repeat = self.num_v_heads // self.num_k_heads
        q = l2_normalized(q.reshape(rows, self.num_k_heads, self.head_k_dim)) * self.head_k_dim**-0.5
        k = l2_normalized(k.reshape(rows, self.num_k_heads, self.head_k_dim))
        if repeat > 1 and self.tiled_heads:  # value head i reads key head i % key heads
            q, k = q.repeat(1, repeat, 1), k.repeat(1, repeat, 1)
        elif repeat > 1:  # value heads g * repeat .. g * repeat + repeat - 1 read key head g
            q, k = q.repeat_interleave(repeat, dim=1), k.repeat_interleave(repeat, dim=1)
        return q, k, v.reshape(rows, self.num_v_heads, self.head_v_dim)
