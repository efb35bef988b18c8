"""What one step's attention needs to know, built once per step by the model runner, shared by every layer."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class PrefillChunk:
    start: int  # first token of the chunk in the step's flat token list
    end: int
    context_len: int  # tokens of this sequence in the cache after this step (cached + chunk)
    block_rows: torch.Tensor | None  # [kv_heads * blocks] block rows of the whole context; None if no earlier context
    causal_mask: torch.Tensor | None  # [chunk, context_len] bool; None when the chunk is the whole context
    window_masks: dict = field(default_factory=dict)  # per sliding window: (first key, mask), made once a step


@dataclass
class AttentionMetadata:
    write_rows: torch.Tensor  # [kv_heads * T] rows of the [kv_heads * slots, head_dim] view, head-major
    num_decodes: int
    # The decodes' context in the shape their back end reads (decode_kernels.KernelDecode or
    # decode_gathered.GatheredDecode, chosen once for the runner); None in a step without decodes.
    decode: object | None
    prefills: list[PrefillChunk]
    # The same step in the sliding-window layers' own pool (kv_cache/sliding_window.py), where the runner keeps one.
    window: AttentionMetadata | None = None
    # A hybrid model's recurrent layers: each sequence's state slot (layers/gated_deltanet.StateMetadata).
    state: object | None = None
