"""Llama-family decoder (Llama, TinyLlama, SmolLM2, Mistral, Qwen2) over the paged KV cache.

Q/K/V and gate/up projections are fused into one matmul each: on a small model the number
of kernel launches, not FLOPs, dominates a decode step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UnsupportedModelError
from ..layers.attention import AttentionMetadata, paged_attention
from ..layers.norm import RMSNorm
from ..layers.rotary import RopeTables, RotaryEmbedding, rope_parameters


class LlamaAttention(nn.Module):
    """Fused Q/K/V, RoPE, paged attention. The families' differences are attributes: `rotary_dim`
    (Phi's partial rotary), `use_rope` (SmolLM3's NoPE layers), `window` (a sliding window),
    `scale`, and `normed_qk` (Qwen3's and Gemma's per-head Q/K norms)."""

    use_rope = True

    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        bias = cfg.qkv_bias
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=cfg.o_bias)
        self.scale = self.head_dim**-0.5
        self.rotary_dim = cfg.rotary_dim
        self.window = getattr(cfg, "sliding_window", None)

    def normed_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """Q and K heads side by side, as they go into RoPE (a family with Q/K norms applies them)."""
        return qk

    def forward(self, x, rope: RopeTables, kv_cache, meta: AttentionMetadata):
        tokens, heads, kv_heads = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(tokens, heads + 2 * kv_heads, self.head_dim)
        # Q and K heads sit side by side: one rotary pass over both halves its ops per layer.
        qk = self.normed_qk(qkv[:, : heads + kv_heads])
        if self.use_rope:
            rope.rotate_(qk if self.rotary_dim == self.head_dim else qk[..., : self.rotary_dim])
        v = qkv[:, heads + kv_heads :]
        out = paged_attention(qk[:, :heads], qk[:, heads:], v, kv_cache[0], kv_cache[1], meta, self.scale, self.window)
        return self.o_proj(out.reshape(tokens, self.q_size))


class LlamaMLP(nn.Module):
    activation = staticmethod(F.silu)  # Gemma's is GELU-tanh

    def __init__(self, cfg):
        super().__init__()
        if cfg.intermediate_size is None:
            raise UnsupportedModelError(
                "the config gives no intermediate_size (a GGUF's feed_forward_length) for a dense feed-forward"
            )
        self.intermediate = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(self.activation(gate) * up)


class LlamaDecoderLayer(nn.Module):
    attention_class = LlamaAttention  # a family that changes only attention (Qwen3) names its own

    def __init__(self, cfg, mlp: nn.Module | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = self.attention_class(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = mlp if mlp is not None else LlamaMLP(cfg)  # a mixture of experts brings its own

    def forward(self, x, rope: RopeTables, kv_cache, meta):
        x = x + self.self_attn(self.input_layernorm(x), rope, kv_cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaArgs:
    """The few config fields our code reads, normalised across Llama/Mistral/Qwen2 configs."""

    def __init__(self, hf_config, max_positions: int):
        self.vocab_size = hf_config.vocab_size
        self.hidden_size = hf_config.hidden_size
        # none in a config whose every feed-forward is experts (Qwen3.5-MoE's: the converter writes no feed_forward_length)
        self.intermediate_size = getattr(hf_config, "intermediate_size", None)
        self.num_hidden_layers = hf_config.num_hidden_layers
        self.num_attention_heads = hf_config.num_attention_heads
        self.num_key_value_heads = getattr(hf_config, "num_key_value_heads", None) or self.num_attention_heads
        self.head_dim = getattr(hf_config, "head_dim", None) or self.hidden_size // self.num_attention_heads
        self.rms_norm_eps = hf_config.rms_norm_eps
        self.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        is_qwen2 = hf_config.model_type == "qwen2"
        self.interleaved_rope_in_gguf = hf_config.model_type in ("llama", "mistral", "mixtral")
        self.qkv_bias = is_qwen2 or bool(getattr(hf_config, "attention_bias", False))
        self.o_bias = bool(getattr(hf_config, "attention_bias", False))
        self.mlp_bias = bool(getattr(hf_config, "mlp_bias", False))
        self.rope = rope_parameters(hf_config)
        self.rotary_dim = self.head_dim  # what RoPE turns of each head (Phi's partial rotary: less)
        # Mistral v0.1's window over every layer, where it is shorter than the context served
        window = getattr(hf_config, "sliding_window", None) if hf_config.model_type == "mistral" else None
        self.sliding_window = window if window and window < max_positions else None
        self.max_positions = max_positions
        self.check_activation(hf_config)

    def check_activation(self, hf_config) -> None:
        act = getattr(hf_config, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r} is not supported by our Llama code (only silu)")


class LlamaForCausalLM(nn.Module):
    decoder_layer_class = LlamaDecoderLayer
    args_class = LlamaArgs  # a family whose config says more (Phi-3's rotary) reads it in its own
    # Whether kernels/layers/llama_layer.cpp computes exactly these layers (models/cpu_step.py):
    # a subclass whose layers do more (SmolLM3's layers without RoPE) sets False and keeps the modules.
    FUSED_CPU_STEP = True

    def __init__(self, hf_config, max_positions: int):
        super().__init__()
        cfg = self.args_class(hf_config, max_positions)
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(cfg.rotary_dim, max_positions, cfg.rope)
        self.layers = nn.ModuleList(self.make_layer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def make_layer(self, cfg, index: int) -> nn.Module:
        """Layer `index` (models/moe.py gives its sparse layers experts instead of an MLP)."""
        return self.decoder_layer_class(cfg)

    def layer_windows(self) -> list[int | None]:
        """Each layer's sliding window (None: full attention): which pool the runner keeps its K/V in."""
        return [layer.self_attn.window for layer in self.layers]

    @property
    def attention_layout(self) -> str:
        window = getattr(self.cfg, "sliding_window", None)
        return f"sliding window {window}" if window else "full attention"

    @property
    def kv_shape(self) -> tuple[int, int, int]:
        """(layers, kv_heads, head_dim): what the KV pool must hold per token slot."""
        return self.cfg.num_hidden_layers, self.cfg.num_key_value_heads, self.cfg.head_dim

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The tokens' input embeddings (Gemma scales them)."""
        return self.embed_tokens(input_ids)

    def forward(self, input_ids, positions, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        x = self.embed(input_ids)
        rope = self.rotary.tables(positions, x.dtype)
        for layer, kv_cache in zip(self.layers, kv_caches):
            x = layer(x, rope, kv_cache, meta)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    # The GGUF architectures whose files this class reads in place (gguf/weights.py).
    GGUF_ARCHITECTURES = ("llama", "mistral", "qwen2")

    def gguf_layout(self) -> tuple[dict[str, list[tuple[str, int | None]]], dict[str, str]]:
        """Where a GGUF keeps our weights: each linear's tensors (rows fused in this order, each with
        the head count whose rotary halves to un-interleave, or None) and each float parameter's;
        a linear's bias is a linear entry of its own ("...qkv_proj.bias"), fused the same way.
        llama.cpp's converter interleaves Q's and K's rotary halves per head for Llama and Mistral
        (their GGUF architecture is "llama"), not for Qwen2 / Qwen3, which rotate halves as HF does."""
        linears, floats = {}, {"norm.weight": "output_norm.weight"}
        cfg = self.cfg
        q_heads, k_heads = (cfg.num_attention_heads, cfg.num_key_value_heads) if cfg.interleaved_rope_in_gguf else (None, None)
        for i in range(cfg.num_hidden_layers):
            blk, ours = f"blk.{i}.", f"layers.{i}."
            for kind in ("weight", "bias"):
                linears[f"{ours}self_attn.qkv_proj.{kind}"] = [
                    (f"{blk}attn_q.{kind}", q_heads),
                    (f"{blk}attn_k.{kind}", k_heads),
                    (f"{blk}attn_v.{kind}", None),
                ]
                linears[f"{ours}self_attn.o_proj.{kind}"] = [(f"{blk}attn_output.{kind}", None)]
                linears[f"{ours}mlp.gate_up_proj.{kind}"] = [(f"{blk}ffn_gate.{kind}", None), (f"{blk}ffn_up.{kind}", None)]
                linears[f"{ours}mlp.down_proj.{kind}"] = [(f"{blk}ffn_down.{kind}", None)]
            floats[ours + "input_layernorm.weight"] = blk + "attn_norm.weight"
            floats[ours + "post_attention_layernorm.weight"] = blk + "ffn_norm.weight"
        linears["lm_head.weight"] = [("token_embd.weight" if cfg.tie_word_embeddings else "output.weight", None)]
        return linears, floats

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Maps HF parameter names onto ours, fusing q/k/v and gate/up."""
        ours = {}
        for name, tensor in state.items():
            if name.startswith("model."):
                name = name[len("model.") :]
            if name.endswith("rotary_emb.inv_freq"):
                continue
            ours[name] = tensor
        for i in range(self.cfg.num_hidden_layers):
            attn, mlp = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
            for kind in ("weight", "bias"):
                parts = [ours.pop(f"{attn}{p}_proj.{kind}", None) for p in "qkv"]
                if parts[0] is not None:
                    ours[f"{attn}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
                parts = [ours.pop(f"{mlp}{p}_proj.{kind}", None) for p in ("gate", "up")]
                if parts[0] is not None:
                    ours[f"{mlp}gate_up_proj.{kind}"] = torch.cat(parts, dim=0)
        if self.cfg.tie_word_embeddings:
            ours.pop("lm_head.weight", None)
            ours["lm_head.weight"] = ours["embed_tokens.weight"]
        missing, unexpected = self.load_state_dict(ours, strict=False)
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match the Llama layout: missing {missing[:5]}, unexpected {unexpected[:5]}")
