"""Which models a server can serve, by name: the model it starts with (MINIVLLM_MODEL, the
embedded SmolLM2 by default) and every model in MINIVLLM_MODELS_DIR.

A folder's models are the GGUF files directly in it (the id is the file name without `.gguf`; the
parts of a split GGUF, `<name>-00001-of-00003.gguf`, are one model named `<name>`), the
transformers folders directly in it (a `config.json` inside; the id is the folder's name), and, as
llama-server's router lays them out, folders holding one model's GGUF (a split one's parts, or the
model beside its `mmproj` projector; the id is the folder's name). Each
model runs with the server's engine settings, its own weights."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from django.conf import settings

from ...engine.config import EngineConfig
from ...engine.loader import ModelLoadError, resolve_source
from . import memory_budget

SPLIT_PART = re.compile(r"^(?P<name>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.gguf$")


@dataclass(frozen=True)
class ModelSpec:
    """One model the server can load: its id, the engine settings it loads with, and the other
    names a request may call it by (its path, the name its engine reports)."""

    name: str
    config: EngineConfig
    aliases: frozenset[str] = frozenset()

    def answers_to(self, requested: str) -> bool:
        return requested == self.name or requested in self.aliases


def folder_models(folder: str) -> dict[str, str]:
    """{id: path} of the models directly in `folder`, sorted by id; a split GGUF by its first part.
    A file or folder that is not a model is passed over."""
    found: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as exc:
        raise ModelLoadError(f"MINIVLLM_MODELS_DIR {folder!r} cannot be read: {exc}") from exc
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if os.path.isfile(os.path.join(entry.path, "config.json")):
                found.setdefault(entry.name, entry.path)
            elif (inside := _gguf_in_folder(entry.path)) is not None:
                found.setdefault(entry.name, inside)
        elif entry.name.endswith(".gguf"):
            split = SPLIT_PART.match(entry.name)
            if split is None:
                found.setdefault(entry.name.removesuffix(".gguf"), entry.path)
            elif int(split["part"]) == 1:
                found.setdefault(split["name"], entry.path)
    return found


def _gguf_in_folder(folder: str) -> str | None:
    """llama-server's layout for a model of several files: a folder holding its GGUF (a split one's
    first part; a vision projector, `mmproj*`, beside it is not the model). None: no single model."""
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(".gguf") and not name.startswith(("mmproj", ".")))
    except OSError:
        return None
    firsts = [name for name in names if (split := SPLIT_PART.match(name)) is None or int(split["part"]) == 1]
    return os.path.join(folder, firsts[0]) if len(firsts) == 1 else None


def start_model_name(config: EngineConfig, served_name: str | None) -> str:
    """The id of the model the server starts with: MINIVLLM_SERVED_MODEL_NAME, else its file or
    folder name (what its engine reports once loaded)."""
    if served_name:
        return served_name
    try:
        return resolve_source(config.model).display_name
    except ModelLoadError:
        return config.model or "default"


def build_catalogue(config: EngineConfig, *, served_name: str | None, models_dir: str | None) -> list[ModelSpec]:
    """The start model first, then the folder's, each once: a folder model named like the start
    model, or pointing at its file, is the start model."""
    name = start_model_name(config, served_name)
    aliases = {alias for alias in (config.model, os.path.basename(config.model or "")) if alias} - {name}
    specs = [ModelSpec(name, config, frozenset(aliases))]
    if models_dir:
        start_path = os.path.abspath(os.path.expanduser(config.model)) if config.model else None
        for model_id, path in folder_models(os.path.expanduser(models_dir)).items():
            if model_id == name or os.path.abspath(path) == start_path:
                continue
            specs.append(ModelSpec(model_id, dataclasses.replace(config, model=path), frozenset({path})))
    return specs


def served_specs(config: EngineConfig, *, all_loaded: bool = False) -> list[ModelSpec]:
    """The catalogue this process's settings describe: the start model (MINIVLLM_MODEL, the embedded
    one when unset) and MINIVLLM_MODELS_DIR's models; with only the folder set, the folder's alone;
    each with its share of the KV budget (memory_budget.shared; `all_loaded`: every model is loaded
    at once, as a `runengine` worker loads them).
    The web processes and the `runengine` workers read the same settings, so they agree on each id."""
    if folder_only():  # the folder's models alone, every one of them (none is skipped as the start model)
        specs = [
            ModelSpec(name, dataclasses.replace(config, model=path), frozenset({path}))
            for name, path in folder_models(os.path.expanduser(settings.MINIVLLM_MODELS_DIR)).items()
        ]
    else:
        specs = build_catalogue(config, served_name=settings.MINIVLLM_SERVED_MODEL_NAME, models_dir=settings.MINIVLLM_MODELS_DIR)
    return memory_budget.shared(specs, len(specs) if all_loaded else settings.MINIVLLM_MODELS_MAX)


def folder_only() -> bool:
    """Only MINIVLLM_MODELS_DIR is set: no default model."""
    return bool(settings.MINIVLLM_MODELS_DIR) and not os.environ.get("MINIVLLM_MODEL")
