"""Which kind of cache each layer keeps, read off the model (no torch: the coordinator asks too).

A layer's place follows its window (`model.layer_windows()`, where the model has sliding-window
layers) or, in a hybrid, its kind (`model.cache_kinds()`: a recurrent layer keeps a state slot).
A model may also give each kind its own head shape (`model.kv_head_shapes()`: Gemma 4's full
layers have wider heads than its sliding ones), and let layers read another layer's K/V instead
of writing their own (`model.kv_sources()`: Gemma 4's KV-shared layers), which then cost no pool.
"""

from __future__ import annotations

from .block_pool import FULL, WINDOW
from .sliding_window import SlidingWindowBlocks


def layer_windows(model) -> list[int | None]:
    """Each layer's sliding window, None for full attention."""
    windows = getattr(model, "layer_windows", None)
    return list(windows()) if windows is not None else [None] * model.kv_shape[0]


def model_window(model) -> int | None:
    """The window the sliding-window pool keeps per sequence (the widest, where layers differ)."""
    return max((w for w in layer_windows(model) if w is not None), default=None)


def window_pool_blocks(model, block_size: int, num_slots: int, step_tokens: int, max_model_len: int) -> int:
    """The sliding-window pool's blocks (0 for a model without sliding-window layers)."""
    window = model_window(model)
    return 0 if window is None else SlidingWindowBlocks.pool_size(num_slots, window, block_size, step_tokens, max_model_len)


def layer_kinds(model) -> list[str]:
    """Each layer's kind of cache: FULL or WINDOW (by its window) or, in a hybrid model, STATE
    (a recurrent layer: `model.cache_kinds()`)."""
    kinds = getattr(model, "cache_kinds", None)
    if kinds is not None:
        return list(kinds())
    return [FULL if window is None else WINDOW for window in layer_windows(model)]


def kv_sources(model) -> list[int]:
    """Each layer's K/V owner: itself, or for a KV-shared layer the earlier layer whose cache it reads."""
    sources = getattr(model, "kv_sources", None)
    return list(sources()) if sources is not None else list(range(len(layer_kinds(model))))


def writer_counts(model) -> dict[str, int]:
    """How many layers of each kind write K/V (or state) of their own: what each pool is sized for."""
    counts: dict[str, int] = {}
    for index, (kind, source) in enumerate(zip(layer_kinds(model), kv_sources(model))):
        if source == index:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def kind_head_shape(model, kind: str) -> tuple[int, int]:
    """(kv heads, head dim) of the K/V the layers of `kind` keep: the model's one shape unless it gives each kind its own."""
    shapes = model.kv_head_shapes() if hasattr(model, "kv_head_shapes") else {}
    if kind in shapes:
        return tuple(shapes[kind])
    _, kv_heads, head_dim = model.kv_shape
    return kv_heads, head_dim
