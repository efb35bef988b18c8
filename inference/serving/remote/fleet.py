"""What a web process knows about the engine workers: the last heartbeat of each, and the sums.

Engines publish a stats message every second; one silent for longer than the timeout (killed,
frozen, partitioned) is dropped, and so are the requests it held (see client.py). Engine
timestamps are shifted onto this process's monotonic clock when a heartbeat arrives.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ...engine.engine_state import EngineState
from ...engine.engine_stats import EngineStats
from ...engine.timing.step_times import merged


@dataclass
class EngineView:
    engine_id: str
    channel: str
    state: str
    seen_at: float  # this process's monotonic clock
    clock_offset: float  # ours minus the engine's
    info: dict = field(default_factory=dict)
    stats: EngineStats = field(default_factory=EngineStats)

    @property
    def has_work(self) -> bool:
        return (self.stats.running or 0) + (self.stats.waiting or 0) > 0

    def summary(self, now: float) -> dict:
        s = self.stats
        return {
            "engine_id": self.engine_id,
            "state": self.state,
            "host": self.info.get("host"),
            "pid": self.info.get("pid"),
            "device": s.device,
            "dtype": s.dtype,
            "requests_accepted": self.info.get("accepted", 0),
            "in_flight": self.info.get("in_flight", 0),
            "running": s.running,
            "waiting": s.waiting,
            "num_slots": s.num_slots,
            "kv_blocks_used": s.kv_blocks_used,
            "kv_blocks_total": s.kv_blocks_total,
            "tokens_per_second": s.tokens_per_second,
            "total_tokens_generated": s.total_tokens_generated,
            "uptime_seconds": s.uptime_seconds,
            "last_heartbeat_s": round(now - self.seen_at, 2),
            "error": self.info.get("error"),
        }


class EngineFleet:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self._engines: dict[str, EngineView] = {}
        self._lock = threading.Lock()

    def update(self, message: dict, now: float | None = None) -> EngineView:
        now = time.monotonic() if now is None else now
        view = EngineView(
            engine_id=message["engine_id"],
            channel=message["engine_channel"],
            state=message["state"],
            seen_at=now,
            clock_offset=now - message["now"],
            info=message.get("info") or {},
            stats=EngineStats.from_dict(message.get("stats") or {}),
        )
        with self._lock:
            self._engines[view.engine_id] = view
        return view

    def prune(self, now: float | None = None) -> list[EngineView]:
        """Forgets engines that stopped or went silent; returns them."""
        now = time.monotonic() if now is None else now
        with self._lock:
            gone = [
                v
                for v in self._engines.values()
                if v.state in (EngineState.STOPPED, EngineState.DEAD) or now - v.seen_at > self.timeout
            ]
            for view in gone:
                del self._engines[view.engine_id]
        return gone

    def get(self, engine_id: str | None) -> EngineView | None:
        return self._engines.get(engine_id) if engine_id else None

    def views(self) -> list[EngineView]:
        with self._lock:
            return sorted(self._engines.values(), key=lambda v: v.engine_id)

    def ready(self) -> list[EngineView]:
        return [v for v in self.views() if v.state == EngineState.READY]

    def summaries(self) -> list[dict]:
        now = time.monotonic()
        return [v.summary(now) for v in self.views()]

    def aggregate(self) -> EngineStats:
        """One snapshot in the shape of EngineThread.stats(), summed over the ready engines."""
        ready = self.ready()
        if not ready:
            return EngineStats(engines=self.summaries())
        totals = {name: _sum(getattr(v.stats, name) for v in ready) for name in EngineStats.summed_fields()}
        slots = [{**slot, "engine_id": v.engine_id} for v in ready for slot in v.stats.slots]
        busy = [v for v in ready if v.has_work] or ready
        # health: the stalest loop among the engines that have work, on our clock
        steps = [v.stats.last_step_at + v.clock_offset for v in busy if v.stats.last_step_at is not None]
        return EngineStats(
            **totals,
            model=_joined(v.stats.model for v in ready),
            device=_joined(v.stats.device for v in ready),
            dtype=_joined(v.stats.dtype for v in ready),
            architecture=_joined(v.stats.architecture for v in ready),
            weights=_joined(v.stats.weights for v in ready),
            speculative=_joined(v.stats.speculative for v in ready),
            step_times=merged(v.stats.step_times for v in ready),
            slots=slots,
            kv_cache_usage=_ratio(totals["kv_blocks_used"], totals["kv_blocks_total"]),
            prefix_cache_hit_rate=_ratio(totals["prefix_cache_hits"], totals["prefix_cache_queries"]) or 0.0,
            uptime_seconds=max((v.stats.uptime_seconds or 0.0) for v in ready),
            last_step_at=min(steps) if steps else None,
            num_engines=len(ready),
            engines=self.summaries(),
        )


def _sum(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _ratio(part, whole):
    return part / whole if part is not None and whole else None


def _joined(values) -> str | None:
    distinct = sorted({str(v) for v in values if v is not None})
    return ", ".join(distinct) if distinct else None
