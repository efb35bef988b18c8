"""One model's place in the registry (registry.py): its slot (status, requests in flight, what the
routes show of it), a request's lease on it, and the errors a lookup raises."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...engine.engine_state import EngineState, ModelInfo
from ..engine_client import EngineClient
from .catalogue import ModelSpec

if TYPE_CHECKING:
    from .registry import ModelRegistry


class ModelNotFound(LookupError):
    """No model in the catalogue answers to the requested name."""


class ModelUnavailable(RuntimeError):
    """The model exists but cannot serve now: its load failed, no room could be made for it, or
    the server is stopping (`code` says which, for the API's error)."""

    def __init__(self, message: str, code: str = "model_unavailable"):
        super().__init__(message)
        self.code = code


@dataclass
class ModelSlot:
    spec: ModelSpec
    keep_alive: float  # seconds idle before it unloads (FOREVER: never); a request may change it
    client: EngineClient | None = None
    error: str | None = None  # why its last load failed or its engine died
    leases: int = 0
    last_used: float = field(default_factory=time.monotonic)
    loaded_at: float | None = None  # wall clock
    load_seconds: float | None = None
    unload_when_idle: bool = False
    loading: bool = False  # a load thread owns the slot until it ends

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def status(self) -> str:
        """llama-server's router values: unloaded, loading, loaded, failed."""
        client = self.client
        if client is None:
            return "failed" if self.error else "unloaded"
        if client.state in (EngineState.NEW, EngineState.LOADING):
            return "loading"
        if client.state in (EngineState.READY, EngineState.RESTARTING):
            return "loaded"
        if client.state == EngineState.DEAD:
            return "failed"
        return "unloaded"

    @property
    def in_flight(self) -> int:
        client = self.client
        return self.leases + (client.num_in_flight() if client is not None else 0)

    def answers_to(self, requested: str) -> bool:
        if self.spec.answers_to(requested):
            return True
        info = self.client.model_info if self.client is not None else None
        return info is not None and requested == info.model_name

    def describe(self, *, default: bool, managed: bool) -> dict:
        """What the routes and the dashboard show of this model (`default`: the server's default
        model; `managed`: the registry loads and unloads it)."""
        status = self.status
        entry = {
            "id": self.name,
            "status": status,
            "path": self.spec.config.model,
            "in_flight": self.in_flight,
            "keep_alive": self.keep_alive,
            "idle_seconds": max(0.0, time.monotonic() - self.last_used),
            "memory_bytes": memory_bytes(self.client) if status == "loaded" else None,
            "loaded_at": self.loaded_at if status == "loaded" else None,
            "load_seconds": self.load_seconds if status == "loaded" else None,
            "default": default,
            "managed": managed,
            "info": self.client.model_info if status == "loaded" else None,
        }
        if status == "failed":
            entry["error"] = self.error or (self.client.error if self.client is not None else None)
        return entry


@dataclass
class Lease:
    """A request's hold on a ready model; `release()` once its prompts are submitted (or refused)."""

    slot: ModelSlot
    client: EngineClient
    info: ModelInfo
    registry: ModelRegistry
    released: bool = False

    @property
    def name(self) -> str:
        return self.slot.name

    def release(self, keep_alive: float | None = None) -> None:
        """`keep_alive` (seconds; a request's, once it was accepted): the model's idle time from
        now on (Ollama's rule), in place of its default."""
        if not self.released:
            self.released = True
            self.registry._release(self.slot, keep_alive)


def memory_bytes(client) -> int | None:
    """What a loaded model holds: its weights and its KV pool, as its engine counts them."""
    try:
        stats = client.stats()
    except Exception:  # a dying engine: no figure
        return None
    if stats.weights_mb is None and stats.kv_pool_mb is None:
        return None
    return int(((stats.weights_mb or 0) + (stats.kv_pool_mb or 0)) * 2**20)
