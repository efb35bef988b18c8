"""Phi-3 / Phi-3.5 / Phi-4-mini: Llama's layers with what Phi's configs add.

- Q/K/V and gate/up come fused in the checkpoint (`qkv_proj`, `gate_up_proj`, the fusion our
  Llama layers make anyway) and in its GGUF (`attn_qkv`, `ffn_up` holding gate then up).
- Partial rotary (Phi-4-mini: `partial_rotary_factor` 0.75): only the first `rotary_dim` of each
  head rotates.
- LongRoPE scaling: per-frequency factors, short or long, and cos/sin scaled by an attention
  factor. transformers switches factors by the sequence's length, so a cached key's rotation
  changes when a sequence crosses the original context; we pick once, as llama.cpp does: the long
  factors where the served context is longer than `original_max_position_embeddings`, else the
  short. A GGUF carries the factors as tensors (`rope_factors_long` / `_short`), set at load.
- An optional sliding window over every layer (Phi-3-mini-4k's config names one).

The layers are exactly Llama's (a window and partial rotary included), so the fused C++ CPU step
runs them.
"""

from __future__ import annotations

import math

import torch

from .llama import LlamaArgs, LlamaForCausalLM


class Phi3Args(LlamaArgs):
    def __init__(self, hf_config, max_positions: int):
        super().__init__(hf_config, max_positions)
        self.interleaved_rope_in_gguf = False  # llama.cpp writes Phi's Q/K rows in HF's order
        params = self.rope
        fraction = float(params.get("partial_rotary_factor") or getattr(hf_config, "partial_rotary_factor", None) or 1.0)
        self.rotary_dim = round(self.head_dim * fraction)  # a GGUF's width comes back as a fraction of head_dim
        self.sliding_window = getattr(hf_config, "sliding_window", None)
        if self.sliding_window is not None and self.sliding_window >= max_positions:
            self.sliding_window = None  # wider than any context served: no window at all
        longrope_in_file = getattr(hf_config, "gguf_longrope", None)  # gguf/config.py: the factors are tensors
        if params["rope_type"] in ("longrope", "su") or longrope_in_file:
            params = {**params, **(longrope_in_file or {})}
            original = int(params.get("original_max_position_embeddings") or hf_config.original_max_position_embeddings)
            self.use_long_factors = max_positions > original
            factors = params.get("long_factor" if self.use_long_factors else "short_factor")
            factor = params.get("factor") or hf_config.max_position_embeddings / original
            attention = params.get("attention_factor")
            if attention is None:
                attention = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
            self.rope = {**params, "rope_type": "longrope", "ext_factors": factors, "attention_factor": attention}


class Phi3ForCausalLM(LlamaForCausalLM):
    args_class = Phi3Args  # Llama's layers read the rotary width and the window from it
    GGUF_ARCHITECTURES = ("phi3",)

    @property
    def attention_layout(self) -> str:
        parts = [f"sliding window {self.cfg.sliding_window}" if self.cfg.sliding_window else "full attention"]
        if self.cfg.rotary_dim != self.cfg.head_dim:
            parts.append(f"RoPE on {self.cfg.rotary_dim} of {self.cfg.head_dim} dimensions")
        if self.cfg.rope["rope_type"] == "longrope":
            parts.append(f"LongRoPE ({'long' if self.cfg.use_long_factors else 'short'} factors)")
        return ", ".join(parts)

    def gguf_layout(self):
        """llama.cpp's Phi-3 names: one `attn_qkv` and one `ffn_up` holding gate then up."""
        linears, floats = super().gguf_layout()
        for i in range(self.cfg.num_hidden_layers):
            blk, ours = f"blk.{i}.", f"layers.{i}."
            for kind in ("weight", "bias"):
                linears[f"{ours}self_attn.qkv_proj.{kind}"] = [(f"{blk}attn_qkv.{kind}", None)]
                linears[f"{ours}mlp.gate_up_proj.{kind}"] = [(f"{blk}ffn_up.{kind}", None)]
        return linears, floats

    def set_rope_factors(self, long: torch.Tensor | None, short: torch.Tensor | None) -> None:
        """A GGUF's LongRoPE factors (its `rope_factors_long` / `_short` tensors): the ones this
        context uses divide the frequencies."""
        factors = long if getattr(self.cfg, "use_long_factors", False) else short
        if factors is not None:
            self.rotary.scale_frequencies(factors)
