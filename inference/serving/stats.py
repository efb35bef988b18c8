"""The stats JSON (one builder for GET /stats and WS /ws/stats) and the health verdict (/health).

Numbers come from the engine client's EngineStats, torch.cuda and psutil; a number nobody
measured is null, never invented.
"""

from __future__ import annotations

import logging
import threading
import time

import psutil
from django.conf import settings

from ..engine.device import gpu_memory
from ..engine.engine_state import EngineState
from ..engine.engine_stats import EngineStats
from . import runtime

log = logging.getLogger("inference.serving.stats")

MB = 1024 * 1024
_SNAPSHOT_TTL_S = 0.25  # many WS clients in the same tick share one snapshot
_cache_lock = threading.Lock()
_cache: tuple[float, int, dict] | None = None
_process = psutil.Process()


def stats_snapshot(*, fresh: bool = False) -> dict:
    """The stats JSON; cached for a fraction of a second so simultaneous readers share it."""
    global _cache
    now, engine_client = time.monotonic(), runtime.get_engine_client()
    with _cache_lock:
        if not fresh and _cache is not None and now - _cache[0] < _SNAPSHOT_TTL_S and _cache[1] == id(engine_client):
            return _cache[2]
    snapshot = _build_snapshot(engine_client)
    with _cache_lock:
        _cache = (now, id(engine_client), snapshot)  # the id: an unloaded engine is not kept alive here
    return snapshot


def _build_snapshot(engine_client) -> dict:
    engine = _engine_stats(engine_client)
    running, waiting = engine.running, engine.waiting
    blocks_used, blocks_total = engine.kv_blocks_used, engine.kv_blocks_total
    snapshot = {
        "engine_state": engine_client.state if engine_client is not None else "not_started",
        "model": runtime.served_model_name(engine_client.model_info) if engine_client is not None else None,
        "device": engine.device,
        "dtype": engine.dtype,
        "architecture": engine.architecture,
        "weights": engine.weights,
        # the seed's fields
        "active_requests": _sum(running, waiting),
        "queue_depth": waiting,
        "tokens_per_second": _round(engine.tokens_per_second, 2),
        "batch_size": running,
        **(_reported_gpu_memory(engine) if engine.gpu_memory_total_mb is not None else gpu_memory(engine.device)),
        "total_tokens_generated": engine.total_tokens_generated,
        "uptime_seconds": _round(
            engine.uptime_seconds if engine.uptime_seconds is not None else time.time() - runtime.process_started_at(), 1
        ),
        # the engine's view
        "num_slots": engine.num_slots,
        "slots": engine.slots,
        "max_queue": engine_client.max_queue if engine_client is not None else settings.MINIVLLM_MAX_QUEUE,
        "kv_blocks_used": blocks_used,
        "kv_blocks_total": blocks_total,
        "kv_cache_usage_pct": _pct(blocks_used, blocks_total),
        "kv_pool_mb": _round(engine.kv_pool_mb, 1),
        "state_pool_mb": _round(engine.state_pool_mb, 1),  # of kv_pool_mb: recurrent-state rows, backed as first written
        "max_model_len": engine.max_model_len,  # the context served (the model's, or what the planned pool holds)
        "weights_mb": _round(engine.weights_mb, 1),
        "prefix_cache_queries": engine.prefix_cache_queries,
        "prefix_cache_hits": engine.prefix_cache_hits,
        "prefix_cache_hit_rate": _round(engine.prefix_cache_hit_rate, 4),
        "num_preemptions": engine.num_preemptions,
        "num_requests_resumed": engine.num_requests_resumed,
        "total_prompt_tokens": engine.total_prompt_tokens,
        "steps": engine.steps,
        # a decode step's phases: recent averages (ms), their overhead (all but the forward), the run's totals
        "step_times": engine.step_times,
        "speculative": engine.speculative,
        "spec_draft_tokens": engine.spec_draft_tokens,
        "spec_accepted_tokens": engine.spec_accepted_tokens,
        "spec_verifications": engine.spec_verifications,
        "spec_verified_tokens": engine.spec_verified_tokens,
        "spec_acceptance_rate": _round(_ratio(engine.spec_accepted_tokens, engine.spec_draft_tokens), 4),
        "spec_tokens_per_step": _round(_ratio(engine.spec_verified_tokens, engine.spec_verifications), 3),
        **_host_memory(),
        **_engines(engine_client, engine if engine_client is not None and engine_client.ready else None),
        "models": _models(),
    }
    return snapshot


def _models() -> list[dict]:
    """Every model the server can serve: its status, memory and requests in flight, and, loaded,
    its own throughput and counts (the dashboard's models panel and chat picker)."""
    models = runtime.get_models()
    if models is None:
        return []
    listed = []
    for slot, entry in zip(list(models.slots.values()), runtime.models_described()):
        stats = _engine_stats(slot.client) if entry["status"] == "loaded" else EngineStats()
        listed.append(
            {
                "id": entry["id"],
                "status": entry["status"],
                "default": entry["default"],
                "managed": entry["managed"],
                "error": entry.get("error"),
                "memory_mb": _round(entry["memory_bytes"] / 2**20, 1) if entry["memory_bytes"] is not None else None,
                "in_flight": entry["in_flight"],
                "keep_alive": entry["keep_alive"],
                "load_seconds": _round(entry["load_seconds"], 2),
                "tokens_per_second": _round(stats.tokens_per_second, 2),
                "running": stats.running,
                "waiting": stats.waiting,
                "total_tokens_generated": stats.total_tokens_generated,
                "slots": stats.slots,
            }
        )
    return listed


def _engine_stats(engine_client) -> EngineStats:
    if engine_client is None or engine_client.state != EngineState.READY:
        return EngineStats()
    try:
        return engine_client.stats()
    except Exception:  # a dying engine must not take /stats down with it
        log.exception("engine stats failed")
        return EngineStats()


def _engines(engine_client, stats: EngineStats | None = None) -> dict:
    """Remote mode: each engine worker this process hears from (EngineStats.engines, a fleet's;
    absent in local mode). `stats` when the caller has them; else asked for, even when not ready."""
    if stats is None:
        try:
            stats = engine_client.stats() if engine_client is not None else None
        except Exception:  # a dying engine must not take /stats down with it
            stats = None
    return {"engines": stats.engines} if stats is not None and stats.engines is not None else {}


def _reported_gpu_memory(engine: EngineStats) -> dict:
    """Remote engines measure their own GPU memory (the web process may have no GPU)."""
    used, total = engine.gpu_memory_used_mb, engine.gpu_memory_total_mb
    return {"gpu_memory_used_mb": used, "gpu_memory_total_mb": total, "gpu_memory_pct": _pct(used, total)}


def _host_memory() -> dict:
    vm = psutil.virtual_memory()
    return {
        "process_rss_mb": round(_process.memory_info().rss / MB, 1),
        "system_memory_used_mb": round((vm.total - vm.available) / MB, 1),
        "system_memory_total_mb": round(vm.total / MB, 1),
        "system_memory_pct": vm.percent,
    }


def _sum(*values):
    return None if any(v is None for v in values) else sum(values)


def _pct(part, whole):
    if part is None or not whole:
        return None
    return round(100.0 * part / whole, 2)


def _ratio(part, whole):
    return None if part is None or not whole else part / whole


def _round(value, digits):
    return None if value is None else round(value, digits)


def engine_health() -> tuple[bool, dict]:
    """(healthy, body): healthy while the default model is loaded and its loop steps when it has
    work, or while it is unloaded (idle past its keep-alive) and can be loaded on demand; unhealthy
    while it loads and once it failed. A folder of models with no default: healthy while it serves
    (each model's state is in /models)."""
    models, engine_client = runtime.get_models(), runtime.get_engine_client()
    if models is None:
        return False, {"status": "unavailable", "state": "not_started", "reason": "the engine has not been started"}
    if models.default_name is None:  # a folder of models, none the default: serving whatever loads
        return True, {"status": "ok", "state": "serving", "models": _model_counts(models)}
    if engine_client is None:
        slot = models.default_slot()
        if slot is not None and slot.status == "loading":
            return False, {"status": "unavailable", "state": EngineState.LOADING, "reason": "the model is loading"}
        if slot is not None and slot.status == "failed":
            return False, {"status": "unavailable", "state": EngineState.DEAD, "reason": slot.error}
        return True, {"status": "ok", "state": "unloaded", "models": _model_counts(models)}
    state = engine_client.state
    if state == EngineState.LOADING:
        return False, {"status": "unavailable", "state": state, "reason": "the model is loading"}
    if not engine_client.ready:
        reason = engine_client.error or (
            "the engine was stopped" if state == EngineState.STOPPED else "the engine loop is not running"
        )
        return False, {"status": "unavailable", "state": state, "reason": reason, **_engines(engine_client)}
    stats = _engine_stats(engine_client)
    has_work = (stats.running or 0) + (stats.waiting or 0) > 0
    last_step_at = stats.last_step_at
    if has_work and last_step_at is not None:
        idle = time.monotonic() - last_step_at
        if idle > settings.MINIVLLM_HEALTH_STALL_SECONDS:
            return False, {
                "status": "unavailable",
                "state": "stalled",
                "reason": f"the engine loop has work but has not stepped for {idle:.0f}s",
            }
    return True, {
        "status": "ok",
        "state": state,
        "model": runtime.served_model_name(engine_client.model_info if engine_client is not None else None),
        "models": _model_counts(models),
        "device": stats.device,
        "dtype": stats.dtype,
        "running": stats.running,
        "waiting": stats.waiting,
        **_engines(engine_client, stats),
    }


def _model_counts(models) -> dict:
    """How many models the server has, and how many of them are loaded."""
    described = models.describe()
    return {"total": len(described), "loaded": sum(entry["status"] == "loaded" for entry in described)}
