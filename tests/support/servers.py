"""What a live server (tests/daphne_server.LiveServer) says about its own state, read from /stats."""

from __future__ import annotations


def idle(server) -> bool:
    """Nothing running, nothing queued, no slot held and every KV block free: every request the
    test made has ended and released what it held (tests wait on this before they count)."""
    stats = server.stats()
    busy = [slot for slot in stats["slots"] if slot.get("request_id")]
    return stats["batch_size"] == 0 and stats["queue_depth"] == 0 and stats["kv_blocks_used"] == 0 and not busy
