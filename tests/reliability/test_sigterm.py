"""SIGTERM under load (real model): no new request is accepted (503, or the port already closed),
every in-flight stream ends with a final event, every row is terminal, and the process exits 0."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.support.daphne_server import TERMINAL
from tests.support.engine_fixtures import wait_until
from tests.support.sse import carries_text, events_of, read_until

pytestmark = [pytest.mark.live, pytest.mark.real_model]
LONG = 600
BODIES = [
    ("/generate", {"prompt": "A very long story", "max_new_tokens": LONG, "ignore_eos": True}),
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": LONG, "stream": True, "ignore_eos": True}),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Tell a story"}], "max_tokens": LONG, "stream": True, "ignore_eos": True},
    ),
    ("/generate", {"prompt": "Another long story", "max_new_tokens": LONG, "ignore_eos": True}),
    ("/v1/completions", {"prompt": "In a land far away", "max_tokens": LONG, "stream": True, "ignore_eos": True}),
]


def refused_or_closed(url: str) -> bool:
    """A new request after SIGTERM: 503 while draining, or nothing listens any more."""
    try:
        resp = httpx.post(f"{url}/generate", json={"prompt": "late", "max_new_tokens": 2}, timeout=10)
    except httpx.TransportError:
        return True
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "engine_not_ready"
    return True


def test_sigterm_under_load(daphne_server):
    server = daphne_server.fresh()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            opened = []
            for path, body in BODIES:
                context = client.stream("POST", path, json=body)
                resp = context.__enter__()
                assert resp.status_code == 200
                lines = resp.iter_lines()
                opened.append((context, lines, read_until(lines, carries_text)))
            server.process.send_signal(signal.SIGTERM)
            assert wait_until(lambda: not server.healthy(), timeout=30, interval=0.05)
            assert refused_or_closed(server.url)
            results = []
            for context, lines, events in opened:
                events.extend(events_of(lines))
                context.__exit__(None, None, None)
                results.append(events)
        for (path, _), events in zip(BODIES, results):
            if path == "/generate":
                assert events[-1]["type"] == "done" and events[-1]["finish_reason"] == "abort", events[-2:]
            else:
                assert events[-1] == "[DONE]" and any(
                    choice.get("finish_reason") == "abort"
                    for event in events[:-1]
                    if isinstance(event, dict)
                    for choice in event.get("choices", [])
                ), events[-3:]
        assert server.process.wait(60) == 0, server.log.read_text()[-6000:]  # the end of the log: a crash's stacks
        rows = server.rows()
        assert len(rows) == len(BODIES) and all(row["status"] in TERMINAL for row in rows), [(r["id"], r["status"]) for r in rows]
        assert all(row["status"] == "aborted" and 0 < row["completion_tokens"] < LONG for row in rows)
    finally:
        server.stop()
