"""How an embedding is pooled from the model's last hidden states, as the checkpoint says.

A sentence-transformers checkpoint (Qwen3-Embedding, gte, e5, bge, ...) names its pooling in
`modules.json` and its Pooling module's `config.json` (last token, mean, or the first token: CLS),
in a local folder or a hub repository (read from the hub cache, fetched there if missing); its
`config.json` may list Matryoshka dimensions (the lengths its embeddings may be cut to). A GGUF
says it in `{arch}.pooling_type` (llama.cpp's: 1 mean, 2 cls, 3 last). MINIVLLM_POOLING
(`last` | `mean` | `cls`) overrides the kind; a checkpoint that says nothing pools the last token,
as vLLM does for decoder-only models. Embeddings are always L2-normalized (after any Matryoshka cut), as
OpenAI's and vLLM's are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..transformers_lock import TRANSFORMERS_LOCK


@dataclass(frozen=True)
class Pooling:
    kind: str  # last | mean | cls
    matryoshka_dimensions: tuple[int, ...] | None  # lengths an embedding may be cut to; None: no Matryoshka
    source: str  # where the choice came from, for the startup log


def _read(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


GGUF_POOLING_TYPES = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's enum llama_pooling_type (0: none, 4: rank)


def _sentence_transformers(read) -> str | None:
    """`read(relative path)`: a file of the checkpoint as JSON, or None."""
    modules = read("modules.json")
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Pooling"):
            config = read(f"{str(module.get('path', '')).strip('/')}/config.json".lstrip("/")) or {}
            if config.get("pooling_mode_lasttoken"):
                return "last"
            if config.get("pooling_mode_mean_tokens"):
                return "mean"
            if config.get("pooling_mode_cls_token"):
                return "cls"
    return None


def _folder_reader(folder: Path):
    return lambda name: _read(folder / name)


def _hub_reader(repo_id: str):
    """Files of a hub repository, from the hub cache (downloaded there if missing and reachable)."""

    def read(name: str):
        try:
            from huggingface_hub import hf_hub_download

            return _read(Path(hf_hub_download(repo_id, name)))
        except Exception:  # not in the repository, no network, not a repository id: says nothing
            return None

    return read


def _gguf_pooling(path: str) -> str | None:
    """The GGUF's `<arch>.pooling_type`, from the config its first load cached (gguf/checkpoint.py)
    or, where there is none, from the file's metadata (transformers' reader: ~0.2 s for a large
    vocabulary, on every load)."""
    from ..gguf.checkpoint import cache_dir

    try:
        cached = cache_dir(path) / "config.json"
        if cached.is_file():
            kind = json.loads(cached.read_text()).get("gguf_pooling_type", "unknown")
            if kind != "unknown":
                return GGUF_POOLING_TYPES.get(kind)
    except (OSError, ValueError):
        pass
    try:
        with TRANSFORMERS_LOCK:
            from transformers.integrations.gguf import read_gguf_metadata

            metadata, _ = read_gguf_metadata(path)
    except Exception:
        return None
    architecture = metadata.get("general.architecture")
    kind = metadata.get(f"{architecture}.pooling_type")
    return GGUF_POOLING_TYPES.get(kind[0] if isinstance(kind, list) else kind)


def _matryoshka(read) -> tuple[int, ...] | None:
    config = read("config.json") or {}
    dims = config.get("matryoshka_dimensions")
    if isinstance(dims, list) and all(isinstance(d, int) and d > 0 for d in dims):
        return tuple(sorted(dims))
    if config.get("is_matryoshka"):
        return ()  # any length up to the hidden size
    return None


def pooling_for(requested: str, model_path: str | None) -> Pooling:
    """The pooling to use: `requested` (MINIVLLM_POOLING) unless `auto`, else the checkpoint's."""
    kind, source, dims = None, "the default for decoder-only models", None
    path = Path(model_path) if model_path else None
    if path is not None and path.is_file() and path.suffix == ".gguf":
        kind = _gguf_pooling(str(path))
        source = "the GGUF's pooling_type" if kind else source
    elif model_path:
        read = _folder_reader(path) if path.is_dir() else _hub_reader(model_path)
        kind = _sentence_transformers(read)
        source = "the checkpoint's sentence-transformers pooling" if kind else source
        dims = _matryoshka(read)
    if requested != "auto":
        kind, source = requested, f"MINIVLLM_POOLING={requested}"
    return Pooling(kind or "last", dims, source)
