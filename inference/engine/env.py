"""Typed readers for environment variables, the one parser of the site's settings
(minivllm_site/settings.py) and the engine's (EngineConfig.from_env): a boolean, a number or a
list reads the same way wherever it is read. Each takes the mapping to read (default os.environ).
Plain Python: the engine never imports Django, and settings import this from here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return None if value is None or value.strip() == "" else value


def env_str(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    value = _raw(name, environ)
    return default if value is None else value


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, environ)
    return default if value is None else value.strip().lower() not in ("0", "false", "no", "off")


def env_int(name: str, default: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    value = _raw(name, environ)
    return default if value is None else int(value)


def env_float(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    value = _raw(name, environ)
    return default if value is None else float(value)


def env_list(name: str, default: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    value = _raw(name, environ)
    return default if value is None else [item.strip() for item in value.split(",") if item.strip()]


def cache_home() -> Path:
    """Where mini-vLLM keeps what it derives once (a GGUF's parsed config and packed weights, the
    kernels' build record, the prefetch tuning): $XDG_CACHE_HOME/minivllm, else ~/.cache/minivllm."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minivllm"


def env_choice(name: str, default: str, choices: tuple[str, ...], environ: Mapping[str, str] | None = None) -> str:
    value = env_str(name, default, environ).strip().lower()
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value
