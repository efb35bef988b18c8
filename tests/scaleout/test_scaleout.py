"""Scale-out for real: two `runengine` workers and two Daphne web workers on Redis and PostgreSQL.

The processes start with docker-compose.yml's own commands. Tests run in file order on one
cluster: spreading and cross-process aborts first, then one engine is killed (-9), then the other
gets SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.support.engine_fixtures import wait_until
from tests.support.sse import carries_text, events_of, read_until

from .cluster import unreachable

pytestmark = [pytest.mark.live, pytest.mark.skipif(unreachable() is not None, reason=unreachable() or "")]
# long enough (seconds, even on a fast idle machine) to still be running when the test acts on it
LONG = {"prompt": "A very long story", "max_new_tokens": 8000, "ignore_eos": True}


def generate(url: str, body: dict) -> list:
    with httpx.stream("POST", f"{url}/generate", json=body, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        return events_of(resp.iter_lines())


def start_long_stream(url: str):
    """A long stream, read up to its first token: (response context, line iterator, request id)."""
    ctx = httpx.stream("POST", f"{url}/generate", json=LONG, timeout=60)
    resp = ctx.__enter__()
    assert resp.status_code == 200, resp.read()
    lines = resp.iter_lines()
    events = read_until(lines, carries_text)
    return ctx, lines, events[0]["request_id"]


def test_concurrent_streams_spread_over_both_engines(cluster):
    before = {k: v["requests_accepted"] for k, v in cluster.engine_stats().items()}
    urls = [url for _, url in cluster.webs] * 4
    body = {"prompt": "Tell me about Redis", "max_new_tokens": 24, "ignore_eos": True}
    with ThreadPoolExecutor(len(urls)) as pool:
        results = list(pool.map(lambda url: generate(url, body), urls))
    for events in results:
        assert events[0]["type"] == "start" and events[-1]["type"] == "done", events[-1]
        assert events[-1]["finish_reason"] == "length" and events[-1]["usage"]["completion_tokens"] == 24
        assert cluster.row(events[0]["request_id"])["status"] == "completed"

    def served() -> dict:  # heartbeats are up to a second old: wait for both to count every request
        after = cluster.engine_stats()
        return {name: after[name]["requests_accepted"] - before.get(name, 0) for name in after}

    # >=: channels-redis may hand one message to two engines; the web side aborts the second copy
    assert wait_until(lambda: sum(served().values()) >= len(urls), timeout=60), served()
    assert set(served()) == {"engine-a", "engine-b"} and all(count > 0 for count in served().values()), served()


def test_both_web_workers_serve_the_openai_api_and_aggregate_stats(cluster):
    for _, url in cluster.webs:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        [model] = client.models.list().data
        reply = client.chat.completions.create(
            model=model.id, messages=[{"role": "user", "content": "hi"}], max_tokens=4, extra_body={"ignore_eos": True}
        )
        assert reply.usage.completion_tokens == 4
        stats = httpx.get(f"{url}/stats", timeout=5).json()
        assert stats["num_slots"] == 8 and len(stats["slots"]) == 8  # 4 per engine, summed
        assert {e["engine_id"] for e in stats["engines"]} == {"engine-a", "engine-b"}
        health = httpx.get(f"{url}/health", timeout=5).json()
        assert health["status"] == "ok" and len(health["engines"]) == 2


def test_client_disconnect_aborts_in_the_engine_across_processes(cluster):
    (_, url_a), (_, url_b) = cluster.webs
    ctx, _, request_id = start_long_stream(url_a)
    assert wait_until(lambda: cluster.holder(request_id, url_b) is not None, timeout=60)
    ctx.__exit__(None, None, None)  # the client goes away mid-stream
    # the other web worker sees the engine's slot freed
    assert wait_until(lambda: cluster.holder(request_id, url_b) is None, timeout=60)
    assert wait_until(lambda: cluster.row(request_id).get("status") == "aborted", timeout=60), cluster.row(request_id)
    assert 0 < cluster.row(request_id)["completion_tokens"] < LONG["max_new_tokens"]


def test_engine_killed_mid_stream_carries_on_on_the_survivor(cluster):
    """The stream goes on from the survivor once the dead engine's heartbeat is missed (10 s here);
    tests/scaleout/test_resume.py checks the text is the unbroken request's, token for token."""
    (_, url_a), _ = cluster.webs
    ctx, lines, request_id = start_long_stream(url_a)
    try:
        assert wait_until(lambda: cluster.holder(request_id) is not None, timeout=60)
        victim = cluster.holder(request_id)
        cluster.engines[victim].send_signal(signal.SIGKILL)
        assert wait_until(lambda: cluster.holder(request_id) not in (None, victim), timeout=60)
        survivor = cluster.holder(request_id)
        assert read_until(lines, carries_text)[-1]["type"] == "token"  # the same stream, still going
    finally:
        ctx.__exit__(None, None, None)  # the client leaves: the survivor aborts it
    aborted = wait_until(lambda: cluster.row(request_id).get("status") == "aborted", timeout=60)
    assert aborted, f"{cluster.row(request_id)}\n{cluster.logs()}"
    assert [segment["engine"] for segment in cluster.row(request_id)["resumes"]] == [victim, survivor]
    # the survivor still serves, and /health lists only it
    assert wait_until(lambda: set(cluster.engine_stats()) == set(cluster.engines) - {victim}, timeout=60)
    assert generate(url_a, {"prompt": "still there?", "max_new_tokens": 3, "ignore_eos": True})[-1]["type"] == "done"


def test_sigterm_on_the_last_engine_ends_in_flight_streams_once_none_takes_them_over(cluster):
    """Its streams get no last output from it; with no engine left to resume them on, they end with
    the error after MINIVLLM_ENGINE_ACCEPT_TIMEOUT: 10 s on a web worker of its own (the shared ones
    wait the default 30 s, which later tests' restarted engines need; the timeout also bounds the
    stream's first accept, so not less on a busy two-core machine)."""
    url_b = cluster.start_web(MINIVLLM_ENGINE_ACCEPT_TIMEOUT="10")
    cluster.wait_ready(engines=1, webs=cluster.own_webs[-1:])
    ctx, lines, request_id = start_long_stream(url_b)
    try:
        assert wait_until(lambda: cluster.holder(request_id, url_b) is not None, timeout=60)
        name = cluster.holder(request_id, url_b)
        process = cluster.engines[name]
        process.send_signal(signal.SIGTERM)
        rest = events_of(lines)
    finally:
        ctx.__exit__(None, None, None)
    assert rest[-1]["type"] == "error" and "shut down" in rest[-1]["message"], rest[-1]
    # its shutdown may wait 10 s for the engine thread and 10 s more for forwarders (worker.py);
    # at 40 s runengine.py's watchdog prints the stacks and exits 70: a stuck stop fails here
    try:
        assert process.wait(60) == 0, cluster.logs()
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the engine did not exit 60 s after SIGTERM:\n{cluster.logs()}") from None
    assert wait_until(lambda: cluster.row(request_id).get("status") == "failed", timeout=60)
    # no engine left: the web workers say so instead of hanging
    assert wait_until(lambda: httpx.get(f"{url_b}/health", timeout=5).status_code == 503, timeout=60)
    resp = httpx.post(f"{url_b}/generate", json={"prompt": "x", "max_new_tokens": 2}, timeout=10)
    assert resp.status_code == 503
