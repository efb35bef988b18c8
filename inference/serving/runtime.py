"""The process's engine: one per serving process, reached only through here.

Views, consumers, asgi.py and tests use `get_engine_client()` / `start()` / `install()` / `reset()` /
`shutdown()`. The engine starts from asgi.py (Daphne has no lifespan), never from
AppConfig.ready(), so `migrate`, `check` and tests do not load a model unless they ask.
With MINIVLLM_ENGINE=remote the "engine" is a RemoteEngine: the same interface, served by
`manage.py runengine` workers over the channel layer.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings

from ..engine.engine_state import EngineState
from .engine_client import EngineClient

log = logging.getLogger("inference.serving.runtime")

_lock = threading.Lock()
_engine_client: EngineClient | None = None
_started_at = time.time()


def get_engine_client() -> EngineClient | None:
    return _engine_client


def start(config=None, *, max_queue: int | None = None) -> EngineClient:
    """Starts the engine thread once per process; later calls return the same client."""
    global _engine_client
    with _lock:
        if _engine_client is not None:
            return _engine_client
        from ..engine.config import EngineConfig
        from ..engine.engine_thread import EngineThread

        config = config or EngineConfig.from_env()
        max_queue = settings.MINIVLLM_MAX_QUEUE if max_queue is None else max_queue
        if settings.MINIVLLM_ENGINE == "remote":
            _engine_client = _start_remote(config, max_queue)
            return _engine_client
        log.info(
            "starting engine: model=%s device=%s dtype=%s max_num_seqs=%s max_queue=%s",
            config.model or "embedded SmolLM2-135M-Instruct",
            config.device,
            config.dtype,
            config.max_num_seqs or "auto",
            max_queue,
        )
        engine_client = EngineThread(config, max_queue=max_queue)
        engine_client.start()
        _engine_client = engine_client
    _watch_loading(engine_client)
    return engine_client


def _start_remote(config, max_queue: int):
    from .remote.client import RemoteEngine

    log.info("engine mode remote: requests go to `runengine` workers over the channel layer")
    if "redis" not in settings.CHANNEL_LAYERS["default"]["BACKEND"].lower():
        log.warning("MINIVLLM_ENGINE=remote without REDIS_URL: no engine worker can reach this process")
    return RemoteEngine(
        config,
        max_queue=max_queue,
        engine_timeout=settings.MINIVLLM_ENGINE_TIMEOUT,
        accept_timeout=settings.MINIVLLM_ENGINE_ACCEPT_TIMEOUT,
    ).start()


def install(engine_client: EngineClient | None) -> EngineClient | None:
    """Puts an engine client in place (tests build one from a tiny model); returns the previous one."""
    global _engine_client
    with _lock:
        previous, _engine_client = _engine_client, engine_client
    return previous


def reset() -> None:
    """Forgets the engine client without stopping it: after fork, the child has no engine thread."""
    global _engine_client
    _engine_client = None


def shutdown() -> None:
    """Stops the engine: every in-flight stream ends with finish_reason "abort". Idempotent."""
    engine_client = _engine_client
    if engine_client is None or engine_client.state in (EngineState.STOPPED, EngineState.DEAD):
        return
    log.info("stopping engine")
    engine_client.shutdown()


def process_started_at() -> float:
    return _started_at


def _watch_loading(engine_client: EngineClient) -> None:
    """Logs one line when the model has loaded (or failed to): the start-up progress line."""

    def watch():
        began = time.monotonic()
        while engine_client.state == EngineState.LOADING:
            time.sleep(0.1)
        if engine_client.state == EngineState.READY:
            log.info("engine ready in %.1fs", time.monotonic() - began)
        else:
            log.error("engine did not start (%s): %s", engine_client.state, engine_client.error)

    threading.Thread(target=watch, name="minivllm-engine-watch", daemon=True).start()


# ---- what the API needs to know about the loaded model -----------------------------------------


def current_model_info():
    """The process's engine client's ModelInfo, or None before a model is loaded: for what a page
    or a request may read before it needs a ready engine."""
    engine_client = _engine_client
    return engine_client.model_info if engine_client is not None else None


def served_model_name(info) -> str | None:
    """The id the API reports and accepts for the model `info` (a ModelInfo, or None before one is
    loaded): MINIVLLM_SERVED_MODEL_NAME, else the model's own name."""
    if settings.MINIVLLM_SERVED_MODEL_NAME:
        return settings.MINIVLLM_SERVED_MODEL_NAME
    return info.model_name if info else None


def accepted_model_names(info, engine_client) -> set[str]:
    """The names a request's `model` may use: the served id, the engine's name, the configured path."""
    names = {served_model_name(info), info.model_name if info else None, engine_client.config.model}
    return {name for name in names if name}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset)
