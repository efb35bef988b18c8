"""The process's models: one registry per serving process, reached only through here.

Views, consumers, asgi.py and tests use `get_models()` / `get_engine_client()` / `start()` /
`install()` / `reset()` / `shutdown()`. The registry (serving/models/) holds every model the
server can serve by name, loading each on demand; a server started with one model is a catalogue
of one. It starts from asgi.py (Daphne has no lifespan), never from AppConfig.ready(), so
`migrate`, `check` and tests do not load a model unless they ask.
With MINIVLLM_ENGINE=remote the one model's "engine" is a RemoteEngine: the same interface,
served by `manage.py runengine` workers over the channel layer.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings

from .engine_client import EngineClient
from .models.catalogue import ModelSpec, folder_only, served_specs, start_model_name
from .models.keep_alive import FOREVER
from .models.registry import ModelRegistry

log = logging.getLogger("inference.serving.runtime")

_lock = threading.Lock()
_models: ModelRegistry | None = None
_started_at = time.time()
DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's: models loaded on demand idle this long (MINIVLLM_KEEP_ALIVE)


def get_models() -> ModelRegistry | None:
    return _models


def get_engine_client() -> EngineClient | None:
    """The default model's engine client (the one a request naming no model gets), while it is
    loaded or loading; None otherwise. Stats, health and the dashboard's figures read it."""
    models = _models
    slot = models.default_slot() if models is not None else None
    client = slot.client if slot is not None else None
    return client if isinstance(client, EngineClient) else None


def start(config=None, *, max_queue: int | None = None) -> ModelRegistry:
    """Builds the registry once per process and starts loading the model the server starts with
    (MINIVLLM_MODEL, the embedded one by default; none where only MINIVLLM_MODELS_DIR is set);
    later calls return the same registry."""
    global _models
    with _lock:
        if _models is not None:
            return _models
        from ..engine.config import EngineConfig

        config = config or EngineConfig.from_env()
        max_queue = settings.MINIVLLM_MAX_QUEUE if max_queue is None else max_queue
        specs = served_specs(config)
        default_name = None if folder_only() else specs[0].name
        if settings.MINIVLLM_ENGINE == "remote":
            _models = ModelRegistry.of_clients(
                {spec.name: _start_remote(spec, max_queue) for spec in specs}, specs, default_name=default_name
            )
            return _models
        _models = ModelRegistry(
            specs,
            client_factory=_engine_thread_factory(max_queue),
            max_loaded=settings.MINIVLLM_MODELS_MAX,
            keep_alive=DEFAULT_KEEP_ALIVE_S if settings.MINIVLLM_KEEP_ALIVE is None else settings.MINIVLLM_KEEP_ALIVE,
            default_name=default_name,
            default_keep_alive=FOREVER if settings.MINIVLLM_KEEP_ALIVE is None else settings.MINIVLLM_KEEP_ALIVE,
            autoload=settings.MINIVLLM_MODELS_AUTOLOAD,
        ).start()
        log.info(
            "models: %s; device=%s dtype=%s max_num_seqs=%s max_queue=%s, at most %d loaded",
            ", ".join(spec.name for spec in specs) or "none (MINIVLLM_MODELS_DIR is empty)",
            config.device,
            config.dtype,
            config.max_num_seqs or "auto",
            max_queue,
            _models.max_loaded,
        )
        if default_name is not None:
            _models.start_loading(_models.slots[default_name])
        models = _models
    if default_name is not None:
        _watch_loading(models, default_name)
    return models


def _engine_thread_factory(max_queue: int):
    def build(spec: ModelSpec) -> EngineClient:
        from ..engine.engine_thread import EngineThread

        return EngineThread(spec.config, max_queue=max_queue)

    return build


def _start_remote(spec: ModelSpec, max_queue: int):
    """A model's client when `runengine` workers serve it: its tokenizer here, its engines there."""
    from .remote.client import RemoteEngine

    log.info("engine mode remote: %s's requests go to `runengine` workers over the channel layer", spec.name)
    if "redis" not in settings.CHANNEL_LAYERS["default"]["BACKEND"].lower():
        log.warning("MINIVLLM_ENGINE=remote without REDIS_URL: no engine worker can reach this process")
    return RemoteEngine(
        spec.config,
        max_queue=max_queue,
        engine_timeout=settings.MINIVLLM_ENGINE_TIMEOUT,
        accept_timeout=settings.MINIVLLM_ENGINE_ACCEPT_TIMEOUT,
        model_name=spec.name,
    ).start()


def install(models: ModelRegistry | EngineClient | None) -> ModelRegistry | None:
    """Puts models in place (tests build an engine from a tiny model: it becomes a catalogue of
    one); returns what was there, for the caller to put back."""
    global _models
    if models is not None and not isinstance(models, ModelRegistry):
        info = models.model_info
        name = served_model_name(info) or (info.model_name if info else None) or start_model_name(models.config, None)
        models = ModelRegistry.of_client(models, name, frozenset({models.config.model} - {None}))
    with _lock:
        previous, _models = _models, models
    return previous


def reset() -> None:
    """Forgets the registry without stopping it: after fork, the child has no engine thread."""
    global _models
    _models = None


def shutdown() -> None:
    """Stops every model's engine: every in-flight stream ends with finish_reason "abort". Idempotent."""
    models = _models
    if models is None:
        return
    log.info("stopping engines")
    models.shutdown(settings.MINIVLLM_SHUTDOWN_TIMEOUT)


def process_started_at() -> float:
    return _started_at


def _watch_loading(models: ModelRegistry, name: str) -> None:
    """Logs one line when the start model has loaded (or failed to): the start-up progress line."""

    def watch():
        began = time.monotonic()
        slot = models.slots[name]
        while slot.status == "loading":
            time.sleep(0.1)
        if slot.status == "loaded":
            log.info("engine ready in %.1fs", time.monotonic() - began)
        else:
            log.error("engine did not start (%s): %s", slot.status, slot.error)

    threading.Thread(target=watch, name="minivllm-engine-watch", daemon=True).start()


# ---- what the API needs to know about the loaded model -----------------------------------------


def current_model_info():
    """The default model's ModelInfo, or None while it is not loaded: for what a page may read
    before it needs a ready engine."""
    engine_client = get_engine_client()
    return engine_client.model_info if engine_client is not None else None


def api_name(slot) -> str:
    """The id the API reports for a model: MINIVLLM_SERVED_MODEL_NAME for the default one, else
    its catalogue id."""
    models = _models
    if models is not None and slot.name == models.default_name and settings.MINIVLLM_SERVED_MODEL_NAME:
        return settings.MINIVLLM_SERVED_MODEL_NAME
    return slot.name


def models_described() -> list[dict]:
    """Every model's entry (ModelRegistry.describe) under its API id, with its ModelInfo once loaded."""
    models = _models
    if models is None:
        return []
    return [{**entry, "id": api_name(slot)} for slot, entry in zip(list(models.slots.values()), models.describe())]


def served_model_name(info) -> str | None:
    """The id the API reports and accepts for the model `info` (a ModelInfo, or None before one is
    loaded): MINIVLLM_SERVED_MODEL_NAME, else the model's own name."""
    if settings.MINIVLLM_SERVED_MODEL_NAME:
        return settings.MINIVLLM_SERVED_MODEL_NAME
    return info.model_name if info else None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset)
