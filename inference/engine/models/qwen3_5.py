"""Qwen3.5 (text): a hybrid. Three of every four layers are Gated DeltaNet linear attention
(layers/gated_deltanet.py), each keeping a fixed-size recurrent state per sequence instead of K/V;
every fourth is gated full attention over the paged KV cache.

The full-attention layers are Qwen3's with two differences: `q_proj` carries an output gate beside
each query head (rows [q head 0, gate head 0, q head 1, ...]), and the attention's output is
multiplied by its sigmoid; and RoPE turns only the first quarter of each head (the text-only case
of the multi-section RoPE: every section sees the same position). Every RMSNorm but the DeltaNet's
gated one multiplies by `1 + weight` (Gemma's, whose GemmaRMSNorm we reuse: the shift is added at load).

The layers say which kind of cache each keeps (`cache_kinds`): the KV plan counts only the attention
layers' K/V, and the recurrent-state pool (kv_cache/recurrent_state.py) holds the rest.
"""

from __future__ import annotations

import torch
from torch import nn

from ..kv_cache.block_pool import FULL
from ..kv_cache.memory_plan import state_bytes
from ..kv_cache.recurrent_state import STATE
from ..layers.attention import AttentionMetadata, paged_attention
from ..layers.gated_deltanet import GatedDeltaNet
from ..layers.rotary import RopeTables
from .gemma3 import GemmaRMSNorm
from .llama import LlamaArgs, LlamaForCausalLM, LlamaMLP
from .qwen3 import Qwen3Attention

LINEAR, ATTENTION = "linear_attention", "full_attention"


class Qwen35Args(LlamaArgs):
    """Llama's fields plus the layer types, the partial rotary and the DeltaNet's shapes."""

    def __init__(self, hf_config, max_positions: int):
        super().__init__(hf_config, max_positions)
        self.qkv_bias = self.o_bias = bool(getattr(hf_config, "attention_bias", False))
        self.interleaved_rope_in_gguf = False
        self.layer_types = list(hf_config.layer_types)
        fraction = float(self.rope.get("partial_rotary_factor") or getattr(hf_config, "partial_rotary_factor", None) or 1.0)
        self.rotary_dim = round(self.head_dim * fraction)
        for name in (
            "linear_conv_kernel_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
        ):
            setattr(self, name, getattr(hf_config, name))


class Qwen35Attention(Qwen3Attention):
    """Qwen3's attention with a sigmoid output gate carried in q_proj, and 1 + weight Q/K norms."""

    norm_class = GemmaRMSNorm
    output_gate = True  # the fused C++ step's flag for the gate (models/cpu_step.py)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.qkv_proj = nn.Linear(cfg.hidden_size, 2 * self.q_size + 2 * self.kv_size, bias=cfg.qkv_bias)

    def forward(self, x, rope: RopeTables, kv_cache, meta: AttentionMetadata):
        tokens, heads, kv_heads, dim = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x)
        query_gate = qkv[:, : 2 * self.q_size].view(tokens, heads, 2 * dim)
        k = qkv[:, 2 * self.q_size : 2 * self.q_size + self.kv_size].view(tokens, kv_heads, dim)
        v = qkv[:, 2 * self.q_size + self.kv_size :].view(tokens, kv_heads, dim)
        qk = torch.cat([self.q_norm(query_gate[..., :dim]), self.k_norm(k)], dim=1)
        rope.rotate_(qk if self.rotary_dim == dim else qk[..., : self.rotary_dim])
        out = paged_attention(qk[:, :heads], qk[:, heads:], v, kv_cache[0], kv_cache[1], meta, self.scale, None)
        gate = query_gate[..., dim:].reshape(tokens, self.q_size)
        return self.o_proj(out.reshape(tokens, self.q_size) * torch.sigmoid(gate))


class Qwen35DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen35Args, layer_type: str, mlp: nn.Module | None = None):
        super().__init__()
        self.linear = layer_type == LINEAR
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if self.linear:
            self.linear_attn = GatedDeltaNet(cfg)
        else:
            self.self_attn = Qwen35Attention(cfg)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = mlp if mlp is not None else LlamaMLP(cfg)  # Qwen3.5-MoE's experts (models/qwen3_5_moe.py)

    def forward(self, x, rope: RopeTables, cache, meta):
        h = self.input_layernorm(x)
        x = x + (self.linear_attn(h, cache, meta) if self.linear else self.self_attn(h, rope, cache, meta))
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen35ForCausalLM(LlamaForCausalLM):
    args_class = Qwen35Args
    FUSED_CPU_STEP = True  # Llama's C++ layer, with the gate, partial RoPE and DeltaNet mixers (models/cpu_step.py)
    GGUF_ARCHITECTURES = ("qwen3_5_text",)  # llama.cpp's `qwen35` files (gguf/config.py)

    def make_layer(self, cfg, index: int) -> nn.Module:
        return Qwen35DecoderLayer(cfg, cfg.layer_types[index])

    def __init__(self, hf_config, max_positions: int):
        super().__init__(text_config(hf_config), max_positions)
        self.norm = GemmaRMSNorm(self.cfg.hidden_size, self.cfg.rms_norm_eps)

    def cache_kinds(self) -> list[str]:
        """Each layer's kind of cache: K/V blocks for attention, a state slot for DeltaNet."""
        return [STATE if layer.linear else FULL for layer in self.layers]

    def layer_windows(self) -> list[int | None]:
        return [None] * len(self.layers)

    def recurrent_mixers(self) -> dict[int, nn.Module]:
        """The DeltaNet of each linear layer, by layer index (the runner replays verified rows on them)."""
        return {i: layer.linear_attn for i, layer in enumerate(self.layers) if layer.linear}

    def state_shapes(self) -> list[tuple]:
        """Each DeltaNet layer's (conv state, recurrent state) shape for one sequence."""
        return [layer.linear_attn.state_shapes for layer in self.layers if layer.linear]

    @property
    def attention_layout(self) -> str:
        """E.g. "hybrid: 18 Gated DeltaNet + 6 attention layers, state 12 MB a sequence"."""
        linear = sum(layer.linear for layer in self.layers)
        mb = state_bytes(self, 1) / 2**20
        return f"hybrid: {linear} Gated DeltaNet + {len(self.layers) - linear} attention layers, state {mb:.3g} MB a sequence"

    def gguf_layout(self):
        """llama.cpp's names, for the builders that read a file's tensors as they are (gguf/weights.py,
        gguf/dense.py; transformers' own GGUF reader, which the other paths take, undoes the converter's
        changes). Its converter stores the 1 + weight norms shifted (our norms' weights), -exp(A_log)
        as `ssm_a`, q_proj whole (gate rows beside each head's), and the value heads tiled: the
        DeltaNets are told so here (`tiled_heads`) and read them in that order."""
        for layer in self.layers:
            if layer.linear:
                layer.linear_attn.tiled_heads = True
        linears, floats = {"lm_head.weight": self._gguf_output()}, {"norm.weight": "output_norm.weight"}
        for i, layer in enumerate(self.layers):
            blk, ours = f"blk.{i}.", f"layers.{i}."
            floats[ours + "input_layernorm.weight"] = blk + "attn_norm.weight"
            floats[ours + "post_attention_layernorm.weight"] = blk + "post_attention_norm.weight"
            linears[ours + "mlp.gate_up_proj.weight"] = [(blk + "ffn_gate.weight", None), (blk + "ffn_up.weight", None)]
            linears[ours + "mlp.down_proj.weight"] = [(blk + "ffn_down.weight", None)]
            if layer.linear:
                lin = ours + "linear_attn."
                parts = ("attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha")
                linears[lin + "in_proj.weight"] = [(f"{blk}{part}.weight", None) for part in parts]
                linears[lin + "out_proj.weight"] = [(blk + "ssm_out.weight", None)]
                floats[lin + "conv_weight"] = blk + "ssm_conv1d.weight"
                floats[lin + "dt_bias"] = blk + "ssm_dt.bias"
                floats[lin + "decay_rate"] = blk + "ssm_a"
                floats[lin + "norm.weight"] = blk + "ssm_norm.weight"
                continue
            attn = ours + "self_attn."
            linears[attn + "qkv_proj.weight"] = [(f"{blk}attn_{p}.weight", None) for p in "qkv"]
            linears[attn + "o_proj.weight"] = [(blk + "attn_output.weight", None)]
            floats[attn + "q_norm.weight"] = blk + "attn_q_norm.weight"
            floats[attn + "k_norm.weight"] = blk + "attn_k_norm.weight"
        return linears, floats

    def _gguf_output(self) -> list[tuple[str, None]]:
        return [("token_embd.weight" if self.cfg.tie_word_embeddings else "output.weight", None)]

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """transformers' names (a Qwen3_5ForConditionalGeneration's language model too: its vision
        tower is left out) onto ours: the DeltaNet's four input projections fused, its conv weight
        flattened, and each 1 + weight norm shifted."""
        ours = {}
        for name, tensor in state.items():
            name = name.replace("model.language_model.", "model.")
            if name.startswith(("model.visual.", "mtp.", "visual.")):
                continue
            name = name.removeprefix("model.")
            if name.endswith("norm.weight") and ".linear_attn.norm." not in name:
                tensor = tensor.float() + 1
            ours[name] = tensor
        for i, layer in enumerate(self.layers):
            if not layer.linear:
                attn = f"layers.{i}.self_attn."
                ours[attn + "qkv_proj.weight"] = torch.cat([ours.pop(f"{attn}{p}_proj.weight") for p in "qkv"])
                continue
            lin = f"layers.{i}.linear_attn."
            parts = [ours.pop(f"{lin}in_proj_{p}.weight") for p in ("qkv", "z", "b", "a")]
            ours[lin + "in_proj.weight"] = torch.cat(parts)
            ours[lin + "conv_weight"] = ours.pop(lin + "conv1d.weight").reshape(layer.linear_attn.conv_dim, -1)
            ours[lin + "decay_rate"] = -ours.pop(lin + "A_log").float().exp()
        for i in range(len(self.layers)):
            for mlp in (f"layers.{i}.mlp.", f"layers.{i}.mlp.shared_expert."):  # (a MoE layer's shared expert)
                if mlp + "gate_proj.weight" in ours:
                    parts = [ours.pop(mlp + "gate_proj.weight"), ours.pop(mlp + "up_proj.weight")]
                    ours[mlp + "gate_up_proj.weight"] = torch.cat(parts)
        if self.cfg.tie_word_embeddings:
            ours["lm_head.weight"] = ours["embed_tokens.weight"]
        missing, unexpected = self.load_state_dict(ours, strict=False)
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match the Qwen3.5 layout: missing {missing[:5]}, unexpected {unexpected[:5]}")


def text_config(hf_config):
    """The language model's config: a Qwen3_5ForConditionalGeneration's `text_config`."""
    return getattr(hf_config, "text_config", None) or hf_config
