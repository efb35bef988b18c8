"""GPT-2 decoder over the paged KV cache (learned positions, LayerNorm, GELU-tanh)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.attention import AttentionMetadata, paged_attention


class GPT2Attention(nn.Module):
    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        self.num_heads = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.scale = self.head_dim**-0.5 if getattr(cfg, "scale_attn_weights", True) else 1.0
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            self.scale /= layer_idx + 1

    def forward(self, x, kv_cache, meta: AttentionMetadata):
        tokens, width = x.shape
        q, k, v = (t.view(tokens, self.num_heads, self.head_dim) for t in self.c_attn(x).split(width, dim=-1))
        out = paged_attention(q, k, v, kv_cache[0], kv_cache[1], meta, self.scale)
        return self.c_proj(out.reshape(tokens, width))


class GPT2Block(nn.Module):
    def __init__(self, cfg, layer_idx: int):
        super().__init__()
        inner = cfg.n_inner or 4 * cfg.n_embd
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = GPT2Attention(cfg, layer_idx)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.c_fc = nn.Linear(cfg.n_embd, inner)
        self.c_proj = nn.Linear(inner, cfg.n_embd)

    def forward(self, x, kv_cache, meta):
        x = x + self.attn(self.ln_1(x), kv_cache, meta)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, hf_config, max_positions: int):
        super().__init__()
        act = getattr(hf_config, "activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"activation_function {act!r} is not supported by our GPT-2 code (only gelu_new)")
        self.cfg = hf_config
        self.vocab_size = hf_config.vocab_size
        self.wte = nn.Embedding(hf_config.vocab_size, hf_config.n_embd)
        self.wpe = nn.Embedding(hf_config.n_positions, hf_config.n_embd)
        self.h = nn.ModuleList(GPT2Block(hf_config, i) for i in range(hf_config.n_layer))
        self.ln_f = nn.LayerNorm(hf_config.n_embd, eps=hf_config.layer_norm_epsilon)
        self.lm_head = nn.Linear(hf_config.n_embd, hf_config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # GPT-2 always ties input and output embeddings

    @property
    def kv_shape(self) -> tuple[int, int, int]:
        return self.cfg.n_layer, self.cfg.n_head, self.cfg.n_embd // self.cfg.n_head

    def forward(self, input_ids, positions, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        x = self.wte(input_ids) + self.wpe(positions)
        for block, kv_cache in zip(self.h, kv_caches):
            x = block(x, kv_cache, meta)
        return self.ln_f(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """HF GPT-2 stores its projections as Conv1D ([in, out]); nn.Linear wants [out, in]."""
        ours = {}
        for name, tensor in state.items():
            name = name.removeprefix("transformer.")
            if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight":
                continue  # causal-mask buffers in old checkpoints; lm_head is tied to wte
            name = name.replace(".mlp.c_fc.", ".c_fc.").replace(".mlp.c_proj.", ".c_proj.")
            if name.endswith(".weight") and any(p in name for p in ("c_attn", "c_proj", "c_fc")):
                tensor = tensor.t()
            ours[name] = tensor.contiguous()
        missing, unexpected = self.load_state_dict(ours, strict=False)
        missing = [m for m in missing if m != "lm_head.weight"]
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match the GPT-2 layout: missing {missing[:5]}, unexpected {unexpected[:5]}")
