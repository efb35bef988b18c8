"""A web process's view of the engines: heartbeats in, stale engines out, stats summed."""

from inference.serving.remote import protocol as wire
from inference.serving.remote.fleet import EngineFleet


def heartbeat(engine_id, *, now, state="ready", running=1, waiting=0, tps=10.0, last_step_at=None):
    return {
        "type": wire.STATS,
        "engine_id": engine_id,
        "engine_channel": f"specific.{engine_id}!x",
        "state": state,
        "now": now,
        "info": {"accepted": 3, "max_queue": 64, "model": {"model_name": "tiny", "max_model_len": 512}},
        "stats": {
            "model": "tiny",
            "device": "cpu",
            "dtype": "float32",
            "num_slots": 4,
            "running": running,
            "waiting": waiting,
            "slots": [{"request_id": "r" if running else None, "tokens": 1}],
            "kv_blocks_used": 10,
            "kv_blocks_total": 100,
            "prefix_cache_queries": 4,
            "prefix_cache_hits": 1,
            "tokens_per_second": tps,
            "total_tokens_generated": 50,
            "uptime_seconds": 9.0,
            "last_step_at": now if last_step_at is None else last_step_at,
        },
    }


def test_aggregate_sums_engines_and_lists_each():
    fleet = EngineFleet(timeout=5)
    fleet.update(heartbeat("a", now=1000.0), now=10.0)
    fleet.update(heartbeat("b", now=7.0, running=0, waiting=2, tps=5.0), now=10.0)
    stats = fleet.aggregate()
    assert stats.running == 1 and stats.waiting == 2 and stats.num_slots == 8
    assert stats.tokens_per_second == 15.0 and stats.kv_cache_usage == 0.1
    assert stats.prefix_cache_hit_rate == 0.25 and stats.device == "cpu"
    assert [slot["engine_id"] for slot in stats.slots] == ["a", "b"]
    assert [e["engine_id"] for e in stats.engines] == ["a", "b"] and stats.num_engines == 2
    assert stats.last_step_at == 10.0  # engine clocks shifted onto ours


def test_silent_or_stopped_engines_are_dropped():
    fleet = EngineFleet(timeout=5)
    fleet.update(heartbeat("a", now=0.0), now=100.0)
    fleet.update(heartbeat("b", now=0.0), now=103.0)
    fleet.update(heartbeat("c", now=0.0, state="stopped"), now=104.0)
    gone = fleet.prune(now=106.0)
    assert {v.engine_id for v in gone} == {"a", "c"}
    assert [v.engine_id for v in fleet.ready()] == ["b"]


def test_loading_engines_are_listed_but_not_summed():
    fleet = EngineFleet(timeout=5)
    fleet.update({**heartbeat("a", now=0.0), "state": "loading", "stats": {}}, now=1.0)
    stats = fleet.aggregate()
    assert stats.running is None and stats.engines[0]["state"] == "loading"


def test_a_fleets_model_info_is_what_every_worker_can_serve():
    """Each worker sends its engine's ModelInfo whole (less the tokenizer); a request may land on
    any of them, so the fleet offers the smallest context, pool and batch among them."""
    from inference.engine.engine_state import ModelInfo

    wired = [
        ModelInfo("tiny", None, 512, 4096, 49152, {"temperature": 0.2}, 8).to_wire(),
        ModelInfo("tiny", None, 256, 8192, 49152, {"temperature": 0.2}, 4).to_wire(),
    ]
    fleet = ModelInfo.of_fleet(wired, tokenizer="the web side's own")
    assert (fleet.max_model_len, fleet.kv_capacity_tokens, fleet.num_slots) == (256, 4096, 4)
    assert (fleet.model_name, fleet.vocab_size, fleet.sampling_defaults) == ("tiny", 49152, {"temperature": 0.2})
    assert fleet.tokenizer == "the web side's own" and fleet.token_limit == 256
