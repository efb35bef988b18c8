"""An engine that dies loses no request: real Redis and PostgreSQL, `runengine` workers and a Daphne
web process (tests/scaleout/cluster.py); a worker SIGKILLed mid-stream, and every request it held
carries on on a live engine: each reply equal, token for token, to the same request served without
a fault (greedy, seeded sampling, a JSON schema, n = 2), no history row left running, the resume
recorded. Then the only worker killed and another started 10 s later: its requests wait and finish
there, and a client that left meanwhile leaves nothing behind."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.engine_fixtures import wait_until
from tests.support.sse import carries_text, events_of, read_until

from .cluster import unreachable

pytestmark = [pytest.mark.live, pytest.mark.skipif(unreachable() is not None, reason=unreachable() or "")]
TOKENS = 160  # long enough to be mid-stream when the kill lands, short enough to finish soon after
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 12}},
    },
    "required": ["name", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engines(cluster):
    """Two engines of our own on the shared web workers (test_scaleout.py, which runs before, stops
    both of its; run alone, this stops them)."""
    for name, process in list(cluster.engines.items()):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        cluster.engines.pop(name)
    for name in ("engine-c", "engine-d"):
        cluster.start_engine(name)
    cluster.wait_ready(engines=2)
    return cluster


def requests() -> list[dict]:
    """24 greedy streams, and one each of seeded sampling, a JSON schema and n = 2."""
    greedy = [
        {"prompt": f"Story {i}: once upon a time", "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True} for i in range(24)
    ]
    return greedy + [
        {"prompt": "A seeded tale", "max_tokens": TOKENS, "temperature": 0.9, "seed": 1234, "ignore_eos": True},
        {"prompt": "Describe a cat as JSON", "max_tokens": 2 * TOKENS, "temperature": 0.8, "seed": 7, "guided_json": SCHEMA},
        {"prompt": "Two tales", "max_tokens": TOKENS, "temperature": 0.9, "seed": 99, "n": 2, "ignore_eos": True},
    ]


def stream(url: str, body: dict, started=None) -> dict:
    """One streamed /v1/completions request: its id, each choice's text and finish reason."""
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        lines = resp.iter_lines()
        events = read_until(lines, carries_text)
        if started is not None:
            started()
        events += events_of(lines)
    chunks = [e for e in events if isinstance(e, dict)]
    assert not [e for e in chunks if "error" in e], chunks[-1]
    texts, reasons = {}, {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice.get("text", "")
            if choice.get("finish_reason"):
                reasons[choice["index"]] = choice["finish_reason"]
    return {"id": chunks[0]["id"], "texts": texts, "reasons": reasons}


def run_all(url: str, bodies: list[dict], on_started=None) -> list[dict]:
    with ThreadPoolExecutor(12) as pool:  # 12 at a time
        return list(pool.map(lambda body: stream(url, body, on_started), bodies))


def test_a_sigkilled_engine_loses_no_request(engines):
    cluster = engines
    (_, url), bodies = cluster.webs[0], requests()
    expected = run_all(url, bodies)
    assert all(r["reasons"] for r in expected)
    json.loads(expected[25]["texts"][0])  # the schema's reply parses

    started, killed = [], []

    def kill_once_a_dozen_run():
        started.append(1)
        if len(started) == 12 and not killed:
            live = [(n, e) for n, e in cluster.engine_stats(url).items() if n in cluster.engines]
            victim = max(live, key=lambda item: item[1]["in_flight"] or 0)[0]
            killed.append(victim)
            cluster.engines[victim].send_signal(signal.SIGKILL)

    got = run_all(url, bodies, kill_once_a_dozen_run)
    assert killed, "the kill never happened"
    assert [(r["texts"], r["reasons"]) for r in got] == [(r["texts"], r["reasons"]) for r in expected]
    assert wait_until(lambda: all(cluster.row(r["id"]).get("status") == "completed" for r in got), timeout=60)
    rows = [cluster.row(r["id"]) for r in got]
    resumed = [row for row in rows if row["resumes"]]
    assert resumed and all(row["resumes"][0]["engine"] == killed[0] for row in resumed)
    assert all(row["resumes"][-1]["engine"] != killed[0] and row["resumes"][-1]["tokens"] > 0 for row in resumed)
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    [counted] = [line for line in metrics.splitlines() if line.startswith("minivllm:num_requests_resumed_total{")]
    assert float(counted.rsplit(" ", 1)[1]) >= len(resumed)
    assert httpx.get(f"{url}/stats", timeout=10).json()["num_requests_resumed"] >= len(resumed)
    # the survivor serves a fresh request
    assert stream(url, {"prompt": "still there?", "max_tokens": 3, "ignore_eos": True})["reasons"] == {0: "length"}


def test_the_only_engine_killed_and_another_started_later_finishes_its_requests(engines):
    """Every request waits for the new engine (within MINIVLLM_ENGINE_ACCEPT_TIMEOUT) and finishes
    there as it would have; one whose client left while no engine was alive is ended, not run."""
    cluster = engines
    (_, url), body = cluster.webs[0], {"prompt": "A long wait", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    [survivor] = [name for name, process in cluster.engines.items() if process.poll() is None]
    expected = stream(url, body)
    with ThreadPoolExecutor(1) as pool:
        ctx = httpx.stream("POST", f"{url}/generate", json={"prompt": "leaving soon", "max_new_tokens": 4000}, timeout=60)
        leaving = ctx.__enter__()
        lines = leaving.iter_lines()
        left_id = read_until(lines, carries_text)[0]["request_id"]
        staying = pool.submit(stream, url, body, lambda: cluster.engines[survivor].send_signal(signal.SIGKILL))
        time.sleep(1)
        ctx.__exit__(None, None, None)  # the client leaves while its engine is dead
        time.sleep(10)
        cluster.start_engine("engine-e")
        got = staying.result(timeout=120)
    assert (got["texts"], got["reasons"]) == (expected["texts"], expected["reasons"])
    assert wait_until(lambda: cluster.row(got["id"]).get("status") == "completed", timeout=60)
    assert [s["engine"] for s in cluster.row(got["id"])["resumes"]] == [survivor, "engine-e"]
    assert wait_until(lambda: cluster.row(left_id).get("status") == "aborted", timeout=60)
    assert wait_until(
        lambda: all(slot.get("request_id") is None for slot in httpx.get(f"{url}/stats", timeout=5).json()["slots"]), timeout=60
    )
