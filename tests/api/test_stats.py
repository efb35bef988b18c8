"""GET /stats (DRF) and WS /ws/stats (Channels): the same JSON, real numbers or null."""

import pytest
from channels.testing import WebsocketCommunicator

from minivllm_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

SEED_FIELDS = {
    "active_requests",
    "queue_depth",
    "tokens_per_second",
    "batch_size",
    "gpu_memory_used_mb",
    "gpu_memory_total_mb",
    "gpu_memory_pct",
    "total_tokens_generated",
    "uptime_seconds",
}
OUR_FIELDS = {
    "model",
    "device",
    "dtype",
    "num_slots",
    "slots",
    "kv_blocks_used",
    "kv_blocks_total",
    "kv_cache_usage_pct",
    "prefix_cache_hit_rate",
    "process_rss_mb",
    "system_memory_used_mb",
    "system_memory_total_mb",
    "system_memory_pct",
}


def test_stats_fields_on_cpu(client, engine_client):
    resp = client.get("/stats")
    assert resp.status_code == 200
    stats = resp.json()
    assert SEED_FIELDS | OUR_FIELDS <= set(stats)
    assert stats["model"] == engine_client.engine.model_name and stats["device"] == "cpu" and stats["dtype"] == "float32"
    # CPU: no GPU numbers are invented; memory comes from psutil
    assert stats["gpu_memory_used_mb"] is None and stats["gpu_memory_total_mb"] is None and stats["gpu_memory_pct"] is None
    assert stats["process_rss_mb"] > 0 and 0 < stats["system_memory_used_mb"] <= stats["system_memory_total_mb"]
    assert stats["num_slots"] == len(stats["slots"]) == engine_client.config.max_num_seqs
    assert all(set(slot) == {"request_id", "choice", "tokens"} for slot in stats["slots"])
    assert stats["kv_blocks_total"] > 0 and 0 <= stats["kv_cache_usage_pct"] <= 100
    assert stats["active_requests"] == stats["queue_depth"] + stats["batch_size"]


def test_stats_without_engine_has_nulls_not_zeros(client, no_engine):
    stats = client.get("/stats").json()
    assert stats["engine_state"] == "not_started"
    assert stats["tokens_per_second"] is None and stats["kv_blocks_total"] is None and stats["model"] is None
    assert stats["process_rss_mb"] > 0


async def test_ws_pushes_stats_every_interval(engine_client, settings):
    settings.MINIVLLM_STATS_INTERVAL = 0.05
    communicator = WebsocketCommunicator(
        application, "/ws/stats", headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")]
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    first = await communicator.receive_json_from(timeout=10)
    second = await communicator.receive_json_from(timeout=10)
    assert SEED_FIELDS | OUR_FIELDS <= set(first) and set(first) == set(second)
    assert first["model"] == engine_client.engine.model_name
    await communicator.disconnect()
