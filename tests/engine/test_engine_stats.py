"""EngineStats: the one declaration of the engine's snapshot, filled by the engine, summed by a fleet."""

from inference.engine.engine_stats import EngineStats
from tests.support.engine_helpers import engine_for, greedy

FLEET_ONLY = {"last_step_at", "gpu_memory_used_mb", "gpu_memory_total_mb", "num_engines", "engines"}


def test_an_engine_fills_every_field_but_the_fleet_and_thread_ones(tiny_hf, smollm_tokenizer):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    engine.add_request("s", engine.tokenize("fill the stats"), greedy(3))
    engine.step()
    stats = engine.stats().to_dict()
    missing = {name for name, value in stats.items() if value is None}
    assert missing == FLEET_ONLY


def test_a_heartbeat_round_trips_and_unknown_keys_are_ignored(tiny_hf, smollm_tokenizer):
    stats = engine_for(tiny_hf, smollm_tokenizer).stats()
    wire = {**stats.to_dict(), "a_field_from_a_newer_worker": 1}
    assert EngineStats.from_dict(wire) == stats


def test_the_summed_fields_are_counts_not_ratios():
    summed = set(EngineStats.summed_fields())
    assert {"running", "waiting", "num_slots", "kv_blocks_used", "kv_blocks_total", "tokens_per_second"} <= summed
    assert not summed & {"kv_cache_usage", "prefix_cache_hit_rate", "uptime_seconds", "model", "slots"}
