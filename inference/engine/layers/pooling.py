"""How an embedding is pooled from the model's last hidden states, as the checkpoint says.

A sentence-transformers checkpoint (Qwen3-Embedding, gte, e5, ...) names its pooling in
`modules.json` and its Pooling module's `config.json` (last token or mean); its `config.json`
may list Matryoshka dimensions (the lengths its embeddings may be cut to). MINIVLLM_POOLING
(`last` | `mean`) overrides the kind; a checkpoint that says nothing pools the last token, as vLLM
does for decoder-only models. Embeddings are always L2-normalized (after any Matryoshka cut), as
OpenAI's and vLLM's are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pooling:
    kind: str  # last | mean
    matryoshka_dimensions: tuple[int, ...] | None  # lengths an embedding may be cut to; None: no Matryoshka
    source: str  # where the choice came from, for the startup log


def _read(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _sentence_transformers(folder: Path) -> str | None:
    modules = _read(folder / "modules.json")
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Pooling"):
            config = _read(folder / str(module.get("path", "")) / "config.json") or {}
            if config.get("pooling_mode_lasttoken"):
                return "last"
            if config.get("pooling_mode_mean_tokens"):
                return "mean"
    return None


def _matryoshka(folder: Path) -> tuple[int, ...] | None:
    config = _read(folder / "config.json") or {}
    dims = config.get("matryoshka_dimensions")
    if isinstance(dims, list) and all(isinstance(d, int) and d > 0 for d in dims):
        return tuple(sorted(dims))
    if config.get("is_matryoshka"):
        return ()  # any length up to the hidden size
    return None


def pooling_for(requested: str, model_path: str | None) -> Pooling:
    """The pooling to use: `requested` (MINIVLLM_POOLING) unless `auto`, else the checkpoint's."""
    folder = Path(model_path) if model_path else None
    kind, source, dims = None, "the default for decoder-only models", None
    if folder is not None and folder.is_dir():
        kind = _sentence_transformers(folder)
        source = "the checkpoint's sentence-transformers pooling" if kind else source
        dims = _matryoshka(folder)
    if requested != "auto":
        kind, source = requested, f"MINIVLLM_POOLING={requested}"
    return Pooling(kind or "last", dims, source)
