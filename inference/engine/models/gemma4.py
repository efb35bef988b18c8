"""Gemma 4 (text): Gemma 3's sliding and full layers, plus what the E2B/E4B and 26B/31B models add.

- **Per-layer input embeddings** (E2B, E4B): a second embedding table gives every token a small
  vector per layer; mixed with a projection of the token's main embedding, each layer adds its own
  slice to the residual through a gate and a projection after its feed-forward.
- **KV-shared layers**: the last `num_kv_shared_layers` layers compute no K/V. Each reads the cache
  the last earlier layer of its own type wrote (`kv_sources`), so the KV plan counts only the
  writers, and a shared layer's query attends over exactly the keys its source's did.
- **Per-type heads**: full layers have wider heads (`global_head_dim`) and may have their own K/V
  head count; the runner keeps each kind's pool in its own shape (`kv_head_shapes`). Full layers
  turn only the first quarter of their rotary frequencies (proportional RoPE); with
  `attention_k_eq_v` (26B, 31B) their V is K's projection before its norm.
- V is RMS-normalised (no weight), queries are not scaled (scale 1.0), every norm multiplies by its
  weight (not Gemma 3's 1 + weight), each layer's output is multiplied by its `layer_scalar`, the
  shared layers' MLP may be twice as wide (`use_double_wide_mlp`), logits are soft-capped.
- **MoE** (26B-A4B): beside the dense MLP, a router picks experts (layers/experts.py) whose output,
  normalised on its own, is added to the MLP's before the post-feed-forward norm.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..kv_cache.block_pool import FULL, WINDOW
from ..layers.attention import AttentionMetadata, paged_attention
from ..layers.experts import Experts
from ..layers.rotary import RopeTables, RotaryEmbedding
from .gemma3 import Gemma3MLP
from .gemma3 import GemmaRMSNorm as RMSNorm  # float32 maths over float32 weights, whatever the dtype (as transformers)
from .llama import LlamaForCausalLM
from .qwen3_5 import text_config

SLIDING, FULL_ATTENTION = "sliding_attention", "full_attention"
ROPE_DEFAULTS = {
    SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
    FULL_ATTENTION: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}


class Gemma4Args:
    """The config fields our code reads, each layer's shape resolved (transformers' `per_layer_config`)."""

    def __init__(self, hf_config, max_positions: int):
        c = hf_config
        self.vocab_size, self.hidden_size, self.intermediate_size = c.vocab_size, c.hidden_size, c.intermediate_size
        self.num_hidden_layers, self.num_attention_heads = c.num_hidden_layers, c.num_attention_heads
        self.rms_norm_eps, self.sliding_window = c.rms_norm_eps, c.sliding_window
        self.layer_types = list(c.layer_types)
        self.layer_shapes = [layer_shape(c, i) for i in range(len(self.layer_types))]
        self.kv_heads_of = {kind: self.layer_shapes[self.layer_types.index(kind)] for kind in set(self.layer_types)}
        params = getattr(c, "rope_parameters", None) or {}
        self.rope = {kind: {**ROPE_DEFAULTS[kind], **(params.get(kind) or {})} for kind in (SLIDING, FULL_ATTENTION)}
        self.k_eq_v = bool(getattr(c, "attention_k_eq_v", False))
        self.qkv_bias = bool(getattr(c, "attention_bias", False))
        self.per_layer_dim = getattr(c, "hidden_size_per_layer_input", 0) or 0
        self.per_layer_vocab = getattr(c, "vocab_size_per_layer_input", None) or self.vocab_size
        self.double_wide_mlp = bool(getattr(c, "use_double_wide_mlp", False))
        self.softcap = getattr(c, "final_logit_softcapping", None)
        self.moe = bool(getattr(c, "enable_moe_block", False))
        self.num_experts, self.top_k = getattr(c, "num_experts", None), getattr(c, "top_k_experts", None)
        self.moe_intermediate_size = getattr(c, "moe_intermediate_size", None)
        self.tie_word_embeddings = True  # Gemma 4's output is always its embedding
        self.max_positions = max_positions
        self.sources = kv_sources_of(self.layer_types, getattr(c, "num_kv_shared_layers", 0) or 0)
        act = getattr(c, "hidden_activation", None) or "gelu_pytorch_tanh"
        if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise ValueError(f"hidden_activation {act!r} is not supported by our Gemma 4 code (only gelu_pytorch_tanh)")
        # "vision" (26B, 31B as published): only an image's own tokens see each other both ways; text stays causal
        if getattr(c, "use_bidirectional_attention", None) not in (None, False, "vision"):
            raise ValueError("bidirectional Gemma 4 attention is not supported: our attention is causal")


def layer_shape(c, index: int) -> tuple[int, int]:
    """(kv heads, head dim) of layer `index`: the config's, or its `per_layer_config` override (a
    transformers config resolves it per layer; a config read back from JSON keeps the plain dict, its
    keys strings, zero-padded from 10 layers on: "04")."""
    overrides = getattr(c, "per_layer_config", None)
    if overrides is None or isinstance(overrides, dict):
        layer = {int(key): value for key, value in (overrides or {}).items()}.get(index) or {}
        return layer.get("num_key_value_heads", c.num_key_value_heads), layer.get("head_dim", c.head_dim)
    return overrides[index].num_key_value_heads, overrides[index].head_dim


def kv_sources_of(layer_types: list[str], shared: int) -> list[int]:
    """Each layer's K/V owner: itself, or (the last `shared` layers) the last earlier unshared layer of its type."""
    first_shared = len(layer_types) - shared
    sources = list(range(len(layer_types)))
    for i in range(first_shared, len(layer_types)):
        owners = [j for j in range(first_shared) if layer_types[j] == layer_types[i]]
        if not owners:
            raise ValueError(f"KV-shared layer {i} ({layer_types[i]}) has no earlier layer of its type to read")
        sources[i] = owners[-1]
    return sources


class Gemma4Attention(nn.Module):
    """Q (and, unless KV-shared, K and V) projected, per-head RMS-normalised, rotated; attention
    unscaled. A writer keeps this step's K/V in `step_kv` for the layers that share them."""

    def __init__(self, cfg: Gemma4Args, index: int):
        super().__init__()
        self.kind = cfg.layer_types[index]
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads, self.head_dim = cfg.layer_shapes[index]
        self.window = cfg.sliding_window if self.kind == SLIDING else None
        self.shared = cfg.sources[index] != index
        self.k_eq_v = cfg.k_eq_v and self.kind == FULL_ATTENTION
        self.eps = cfg.rms_norm_eps
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if self.shared:
            self.q_proj = nn.Linear(cfg.hidden_size, self.q_size, bias=cfg.qkv_bias)
        else:
            rows = self.q_size + (1 if self.k_eq_v else 2) * self.kv_size
            self.qkv_proj = nn.Linear(cfg.hidden_size, rows, bias=cfg.qkv_bias)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=cfg.qkv_bias)

    def forward(self, x, rope: RopeTables, kv_cache, meta: AttentionMetadata, step_kv: dict):
        tokens, heads, dim = x.shape[0], self.num_heads, self.head_dim
        if self.shared:
            q = rope.rotate_(self.q_norm(self.q_proj(x).view(tokens, heads, dim)))
            k, v = step_kv[self.kind]
        else:
            qkv = self.qkv_proj(x)
            q = qkv[:, : self.q_size].view(tokens, heads, dim)
            k = qkv[:, self.q_size : self.q_size + self.kv_size].view(tokens, self.num_kv_heads, dim)
            v = k if self.k_eq_v else qkv[:, self.q_size + self.kv_size :].view(tokens, self.num_kv_heads, dim)
            v = F.rms_norm(v.float(), (dim,), None, self.eps).to(x.dtype)
            qk = rope.rotate_(torch.cat([self.q_norm(q), self.k_norm(k)], dim=1))
            q, k = qk[:, :heads], qk[:, heads:]
            step_kv[self.kind] = (k, v)  # the last writer of each kind is what its shared layers read
        out = paged_attention(q, k, v, kv_cache[0], kv_cache[1], meta, 1.0, self.window, write=not self.shared)
        return self.o_proj(out.reshape(tokens, self.q_size))


class Gemma4MLP(Gemma3MLP):
    """Gemma's GELU-tanh gated MLP at a given width (a KV-shared layer's is doubled where the config says)."""

    def __init__(self, hidden: int, intermediate: int):
        nn.Module.__init__(self)
        self.intermediate = intermediate
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)


class Gemma4Router(nn.Module):
    """Gemma 4's router: the residual RMS-normalised (no weight), scaled per channel and by
    hidden^-0.5, a softmax over all experts, the top k renormalised and scaled per expert."""

    def __init__(self, cfg: Gemma4Args):
        super().__init__()
        self.top_k, self.eps, self.root = cfg.top_k, cfg.rms_norm_eps, cfg.hidden_size**-0.5
        self.proj = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(cfg.hidden_size), requires_grad=False)
        self.per_expert_scale = nn.Parameter(torch.ones(cfg.num_experts), requires_grad=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)
        probs = torch.softmax(self.proj(h * self.scale.to(x.dtype) * self.root).float(), dim=-1)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True) * self.per_expert_scale.float()[ids]
        return weights, ids


class Gemma4MoE(nn.Module):
    """The expert half of a MoE layer's feed-forward, from the residual: its own pre-norm, the
    router's choice, the experts' weighted sum, its own post-norm."""

    def __init__(self, cfg: Gemma4Args):
        super().__init__()
        self.router = Gemma4Router(cfg)
        self.experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        self.pre_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        weights, ids = self.router(residual)
        outputs = self.experts(self.pre_norm(residual), ids, Gemma3MLP.activation).view(len(residual), ids.shape[1], -1)
        return self.post_norm((outputs * weights.to(outputs.dtype).unsqueeze(-1)).sum(dim=1))


class Gemma4DecoderLayer(nn.Module):
    def __init__(self, cfg: Gemma4Args, index: int):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.sliding = cfg.layer_types[index] == SLIDING
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Gemma4Attention(cfg, index)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        wide = 2 if cfg.double_wide_mlp and self.self_attn.shared else 1
        self.mlp = Gemma4MLP(h, cfg.intermediate_size * wide)
        self.post_feedforward_layernorm = RMSNorm(h, eps)
        self.moe = Gemma4MoE(cfg) if cfg.moe else None
        if self.moe is not None:
            self.post_mlp_norm = RMSNorm(h, eps)  # the dense half's own post-norm before the two are added
        if cfg.per_layer_dim:
            self.per_layer_input_gate = nn.Linear(h, cfg.per_layer_dim, bias=False)
            self.per_layer_projection = nn.Linear(cfg.per_layer_dim, h, bias=False)
            self.post_per_layer_input_norm = RMSNorm(h, eps)
        self.layer_scalar = nn.Parameter(torch.ones(1), requires_grad=False)

    def forward(self, x, per_layer_input, rope: RopeTables, kv_cache, meta, step_kv: dict):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rope, kv_cache, meta, step_kv))
        ff = self.mlp(self.pre_feedforward_layernorm(x))
        if self.moe is not None:
            ff = self.post_mlp_norm(ff) + self.moe(x)
        x = x + self.post_feedforward_layernorm(ff)
        if per_layer_input is not None:
            gate = Gemma3MLP.activation(self.per_layer_input_gate(x)) * per_layer_input
            x = x + self.post_per_layer_input_norm(self.per_layer_projection(gate))
        return x * self.layer_scalar.to(x.dtype)


class PerLayerInputs(nn.Module):
    """Each token's vector for every layer: its row of the per-layer table (× √dim) and a projection
    of its main embedding (× hidden^-0.5, normalised per layer), averaged (× 2^-0.5)."""

    def __init__(self, cfg: Gemma4Args):
        super().__init__()
        self.layers, self.dim = cfg.num_hidden_layers, cfg.per_layer_dim
        self.embed_tokens_per_layer = nn.Embedding(cfg.per_layer_vocab, self.layers * self.dim)
        self.per_layer_model_projection = nn.Linear(cfg.hidden_size, self.layers * self.dim, bias=False)
        self.per_layer_projection_norm = RMSNorm(self.dim, cfg.rms_norm_eps)
        self.projection_scale = cfg.hidden_size**-0.5

    def forward(self, input_ids: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """[T, layers, dim]."""
        tokens = self.embed_tokens_per_layer(input_ids) * torch.tensor(math.sqrt(self.dim), dtype=embeds.dtype)
        projected = self.per_layer_model_projection(embeds) * self.projection_scale
        projected = self.per_layer_projection_norm(projected.view(-1, self.layers, self.dim))
        return (projected + tokens.view(-1, self.layers, self.dim)) * 2.0**-0.5


class Gemma4ForCausalLM(LlamaForCausalLM):
    FUSED_CPU_STEP = False  # the C++ layer is Llama's
    GGUF_ARCHITECTURES = ("gemma4_text",)
    UNSUPPORTED_DTYPES = (torch.float16,)  # as Gemma 3: its activations outgrow float16's range
    TRANSFORMERS_READS_GGUF = False  # its GGUF reader knows only part of the layout: ours de-quantizes (gguf/dense.py)

    def __init__(self, hf_config, max_positions: int):
        nn.Module.__init__(self)
        cfg = Gemma4Args(text_config(hf_config), max_positions)
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.per_layer_inputs = PerLayerInputs(cfg) if cfg.per_layer_dim else None
        self.local_rotary = (
            RotaryEmbedding(cfg.kv_heads_of[SLIDING][1], max_positions, cfg.rope[SLIDING]) if SLIDING in cfg.kv_heads_of else None
        )
        # (named `rotary`: a GGUF's rope_freqs, which zero the full layers' unturned frequencies, apply to it)
        self.rotary = RotaryEmbedding(cfg.kv_heads_of[FULL_ATTENTION][1], max_positions, cfg.rope[FULL_ATTENTION])
        self.layers = nn.ModuleList(Gemma4DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.embed_tokens.weight

    def kv_sources(self) -> list[int]:
        return list(self.cfg.sources)

    def kv_head_shapes(self) -> dict[str, tuple[int, int]]:
        """(kv heads, head dim) of each pool: the full layers' heads are wider."""
        kinds = {SLIDING: WINDOW, FULL_ATTENTION: FULL}
        return {kinds[kind]: shape for kind, shape in self.cfg.kv_heads_of.items()}

    @property
    def kv_shape(self) -> tuple[int, int, int]:
        return (self.cfg.num_hidden_layers, *self.cfg.kv_heads_of[FULL_ATTENTION])

    @property
    def attention_layout(self) -> str:
        """E.g. "sliding window 512 ×28/35, 20 layers share KV, per-layer inputs 256"."""
        types, shared = self.cfg.layer_types, sum(s != i for i, s in enumerate(self.cfg.sources))
        parts = [f"sliding window {self.cfg.sliding_window} ×{types.count(SLIDING)}/{len(types)}"]
        if shared:
            parts.append(f"{shared} layers share KV")
        if self.cfg.per_layer_dim:
            parts.append(f"per-layer inputs {self.cfg.per_layer_dim}")
        if self.cfg.moe:
            parts.append(f"{self.cfg.top_k} of {self.cfg.num_experts} experts")
        return ", ".join(parts)

    def forward(self, input_ids, positions, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        x = x * torch.tensor(math.sqrt(self.cfg.hidden_size), dtype=x.dtype)  # rounded to the dtype, as transformers does
        per_layer = self.per_layer_inputs(input_ids, x) if self.per_layer_inputs is not None else None
        ropes = {FULL_ATTENTION: self.rotary.tables(positions, x.dtype)}
        if self.local_rotary is not None:
            ropes[SLIDING] = self.local_rotary.tables(positions, x.dtype)
        step_kv: dict = {}
        for i, (layer, kv_cache) in enumerate(zip(self.layers, kv_caches)):
            layer_input = per_layer[:, i] if per_layer is not None else None
            x = layer(x, layer_input, ropes[layer.self_attn.kind], kv_cache, meta, step_kv)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        cap = self.cfg.softcap
        return torch.tanh(logits / cap) * cap if cap else logits

    def gguf_layout(self):
        """llama.cpp's Gemma 4 names (its converter writes the norms unshifted: Gemma 4's multiply by
        their weight); a KV-shared layer's file has only its Q; the per-layer table is read apart (`gguf_embeddings`)."""
        linears = {"lm_head.weight": [("token_embd.weight", None)]}
        floats = {"norm.weight": "output_norm.weight"}
        if self.per_layer_inputs is not None:
            linears["per_layer_inputs.per_layer_model_projection.weight"] = [("per_layer_model_proj.weight", None)]
            floats["per_layer_inputs.per_layer_projection_norm.weight"] = "per_layer_proj_norm.weight"
        for i, layer in enumerate(self.layers):
            blk, ours = f"blk.{i}.", f"layers.{i}."
            attn = layer.self_attn
            if attn.shared:
                linears[ours + "self_attn.q_proj.weight"] = [(blk + "attn_q.weight", None)]
            else:
                parts = "qk" if attn.k_eq_v else "qkv"
                linears[ours + "self_attn.qkv_proj.weight"] = [(f"{blk}attn_{p}.weight", None) for p in parts]
                floats[ours + "self_attn.k_norm.weight"] = blk + "attn_k_norm.weight"
            linears[ours + "self_attn.o_proj.weight"] = [(blk + "attn_output.weight", None)]
            floats[ours + "self_attn.q_norm.weight"] = blk + "attn_q_norm.weight"
            linears[ours + "mlp.gate_up_proj.weight"] = [(blk + "ffn_gate.weight", None), (blk + "ffn_up.weight", None)]
            linears[ours + "mlp.down_proj.weight"] = [(blk + "ffn_down.weight", None)]
            for norm, name in (
                ("input_layernorm", "attn_norm"),
                ("post_attention_layernorm", "post_attention_norm"),
                ("pre_feedforward_layernorm", "ffn_norm"),
                ("post_feedforward_layernorm", "post_ffw_norm"),
                ("layer_scalar", "layer_output_scale"),
            ):
                floats[ours + norm + ("" if norm == "layer_scalar" else ".weight")] = f"{blk}{name}.weight"
            if self.per_layer_inputs is not None:
                linears[ours + "per_layer_input_gate.weight"] = [(blk + "inp_gate.weight", None)]
                linears[ours + "per_layer_projection.weight"] = [(blk + "proj.weight", None)]
                floats[ours + "post_per_layer_input_norm.weight"] = blk + "post_norm.weight"
            if layer.moe is not None:
                linears[ours + "moe.router.proj.weight"] = [(blk + "ffn_gate_inp.weight", None)]
                floats[ours + "moe.router.scale"] = blk + "ffn_gate_inp.scale"
                floats[ours + "moe.router.per_expert_scale"] = blk + "ffn_down_exps.scale"
                floats[ours + "moe.pre_norm.weight"] = blk + "pre_ffw_norm_2.weight"
                floats[ours + "moe.post_norm.weight"] = blk + "post_ffw_norm_2.weight"
                floats[ours + "post_mlp_norm.weight"] = blk + "post_ffw_norm_1.weight"
        return linears, floats

    def gguf_expert_layout(self) -> dict[str, list[str]]:
        """Each MoE layer's experts: gate and up in one tensor per layer (`ffn_gate_up_exps`), or two."""
        return {
            f"layers.{i}.moe.experts.{part}": names
            for i, layer in enumerate(self.layers)
            if layer.moe is not None
            for part, names in (
                ("gate_up", [f"blk.{i}.ffn_gate_up_exps.weight"]),
                ("down", [f"blk.{i}.ffn_down_exps.weight"]),
            )
        }

    def gguf_embeddings(self) -> dict[str, str]:
        """Lookup tables read from the file's rows as they are (gguf/weights.py): the per-layer table
        (E2B: 262k × 8,960 values, 4.7 GB in bfloat16, 1.2 GB as the file's Q4_K-sized rows)."""
        if self.per_layer_inputs is None:
            return {}
        return {"per_layer_inputs.embed_tokens_per_layer": "per_layer_token_embd.weight"}

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """transformers' names (a Gemma4ForConditionalGeneration's language model too: its vision and
        audio towers are left out) onto ours: Q/K/V and gate/up fused, the MoE layer's parts renamed."""
        prefix = "model.language_model." if any(n.startswith("model.language_model.") for n in state) else "model."
        ours = {}
        for name, tensor in state.items():
            if name.startswith(prefix) and not name.endswith("rotary_emb.inv_freq"):  # (not the towers, nor a tied lm_head)
                ours[name.removeprefix(prefix)] = tensor
        for key in ("embed_tokens_per_layer", "per_layer_model_projection", "per_layer_projection_norm"):
            if f"{key}.weight" in ours:
                ours[f"per_layer_inputs.{key}.weight"] = ours.pop(f"{key}.weight")
        for i, layer in enumerate(self.layers):
            attn, mlp, pre = f"layers.{i}.self_attn.", f"layers.{i}.mlp.", f"layers.{i}."
            if layer.self_attn.shared:
                for dropped in ("k_proj", "v_proj", "k_norm", "v_norm"):
                    ours.pop(f"{attn}{dropped}.weight", None)
            else:
                parts = "qk" if layer.self_attn.k_eq_v else "qkv"
                ours[attn + "qkv_proj.weight"] = torch.cat([ours.pop(f"{attn}{p}_proj.weight") for p in parts])
            ours[mlp + "gate_up_proj.weight"] = torch.cat([ours.pop(mlp + "gate_proj.weight"), ours.pop(mlp + "up_proj.weight")])
            if layer.moe is not None:
                for theirs, mine in (
                    ("router.proj.weight", "moe.router.proj.weight"),
                    ("router.scale", "moe.router.scale"),
                    ("router.per_expert_scale", "moe.router.per_expert_scale"),
                    ("experts.gate_up_proj", "moe.experts.gate_up.weight"),
                    ("experts.down_proj", "moe.experts.down.weight"),
                    ("pre_feedforward_layernorm_2.weight", "moe.pre_norm.weight"),
                    ("post_feedforward_layernorm_2.weight", "moe.post_norm.weight"),
                    ("post_feedforward_layernorm_1.weight", "post_mlp_norm.weight"),
                ):
                    ours[pre + mine] = ours.pop(pre + theirs)
        ours["lm_head.weight"] = ours["embed_tokens.weight"]
        missing, unexpected = self.load_state_dict(ours, strict=False)
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match the Gemma 4 layout: missing {missing[:5]}, unexpected {unexpected[:5]}")
