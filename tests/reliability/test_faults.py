"""Fault injection on a live server (real model) through the test-only POST /_test/fault:
a model step raising mid-batch fails only that step's requests; a dying loop turns /health 503,
the engine restarts, and the streams it held carry on from where they were (engine/resume.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.engine_fixtures import wait_until
from tests.support.sse import carries_text, events_of, read_until

pytestmark = [pytest.mark.live, pytest.mark.real_model]
LONG = {"max_new_tokens": 400, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(daphne_server):
    return daphne_server(MINIVLLM_FAULT_INJECTION="1")


def open_streams(client: httpx.Client, server, count: int):
    """`count` /generate streams, each read up to its first token (so all sit in the batch)."""
    opened = []
    for index in range(count):
        context = client.stream("POST", f"{server.url}/generate", json={"prompt": f"Story number {index}:", **LONG})
        resp = context.__enter__()
        assert resp.status_code == 200
        lines = resp.iter_lines()
        opened.append((context, lines, read_until(lines, carries_text)))
    return opened


def finish(opened) -> list[list[dict]]:
    results = []
    for context, lines, events in opened:
        events.extend(events_of(lines))
        context.__exit__(None, None, None)
        results.append(events)
    return results


def generate_ok(server) -> None:
    with httpx.stream(
        "POST", f"{server.url}/generate", json={"prompt": "Hello", "max_new_tokens": 4, "ignore_eos": True}, timeout=60
    ) as resp:
        events = events_of(resp.iter_lines())
    assert events[-1]["type"] == "done" and events[-1]["finish_reason"] == "length", events
    assert server.wait_row(events[0]["request_id"])["status"] == "completed"


def inject(server, **body) -> None:
    resp = httpx.post(f"{server.url}/_test/fault", json=body, timeout=30)
    assert resp.status_code == 200, resp.text


def test_step_fault_fails_only_that_steps_requests(server):
    with httpx.Client(timeout=120) as client:
        opened = open_streams(client, server, 3)
        inject(server, kind="step")
        results = finish(opened)
    for events in results:
        assert events[-1]["type"] == "error" and "injected step failure" in events[-1]["message"], events[-3:]
        row = server.wait_row(events[0]["request_id"])
        assert row["status"] == "failed" and row["finish_reason"] == "error"
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    generate_ok(server)  # the engine keeps serving


def test_loop_death_turns_health_503_then_restarts_and_its_streams_complete(server):
    with httpx.Client(timeout=120) as client:
        opened = open_streams(client, server, 2)
        inject(server, kind="loop", hold_restart=True)  # restarting until released
        assert wait_until(lambda: httpx.get(f"{server.url}/health", timeout=10).status_code == 503, timeout=60)
        inject(server, kind="release")
        results = finish(opened)
    for events in results:
        assert events[-1]["type"] == "done" and events[-1]["finish_reason"] == "length", events[-3:]
        row = server.wait_row(events[0]["request_id"])
        assert row["status"] == "completed" and row["completion_tokens"] == LONG["max_new_tokens"]
        assert [s["engine"] for s in json.loads(row["resumes"])] == ["engine", "engine (restart 1)"]
    assert wait_until(server.healthy, timeout=60)
    generate_ok(server)
    assert "restarting the engine loop" in server.log.read_text()


def test_fault_hook_is_not_routed_by_default(client):
    """In-process with the default settings: the test hook does not exist."""
    resp = client.post("/_test/fault", {"kind": "loop"}, content_type="application/json")
    assert resp.status_code == 404
