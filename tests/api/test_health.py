"""GET /health: 503 with a reason until the model is loaded and the loop runs, 200 while it does."""

import threading

import pytest

from inference.engine.engine_thread import EngineThread
from inference.serving import runtime
from tests.support.engine_fixtures import start_engine_thread, tiny_engine_config, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gated_engine_thread(session_engine_client, tiny_llama_dir):
    """A real engine thread whose model load waits for the test to open the gate."""
    gate = threading.Event()
    engine_client = start_engine_thread(tiny_engine_config(tiny_llama_dir), bundle=session_engine_client.engine.bundle, gate=gate)
    previous = runtime.install(engine_client)
    yield engine_client, gate
    gate.set()
    runtime.install(previous)
    engine_client.shutdown()


async def test_503_while_loading_then_200_then_503_when_stopped(async_client, gated_engine_thread):
    engine_client, gate = gated_engine_thread
    resp = await async_client.get("/health")
    assert resp.status_code == 503
    assert resp.json() == {"status": "unavailable", "state": "loading", "reason": "the model is loading"}

    generate = await async_client.post("/generate", {"prompt": "x"}, content_type="application/json")
    assert generate.status_code == 503 and generate.json()["error"]["code"] == "engine_not_ready"
    listed = await async_client.get("/v1/models")  # the model is listed, loading
    assert listed.status_code == 200 and [m["status"]["value"] for m in listed.json()["data"]] == ["loading"]

    gate.set()
    assert wait_until(lambda: engine_client.ready)
    resp = await async_client.get("/health")
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "ok" and body["model"] == engine_client.engine.model_name and body["device"] == "cpu"

    engine_client.shutdown()
    resp = await async_client.get("/health")
    assert resp.status_code == 503 and resp.json()["state"] == "stopped"


async def test_503_when_no_engine_was_started(async_client, no_engine):
    resp = await async_client.get("/health")
    assert resp.status_code == 503
    assert resp.json()["state"] == "not_started" and resp.json()["reason"]


async def test_503_when_the_model_failed_to_load(async_client, tmp_path):
    engine_client = EngineThread(tiny_engine_config(str(tmp_path / "missing"))).start()
    wait_until(lambda: engine_client.state != "loading")
    previous = runtime.install(engine_client)
    try:
        resp = await async_client.get("/health")
        assert resp.status_code == 503
        body = resp.json()
        assert body["state"] == "dead" and body["reason"]
    finally:
        runtime.install(previous)
