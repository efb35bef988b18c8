"""Scale-out with several models: a web worker whose catalogue is a folder of two models (`first`,
`second`), and `runengine` workers each started with the model (or folder) it serves. A request
goes to a worker of its model, `/v1/models` lists both with their status, one model's workers
going leaves the other serving, and a request whose worker dies carries on on another worker of
the same model. Runs after test_scaleout.py on the package's cluster (its engines are gone by
then); this module's engines stop at its end, its web worker with the cluster."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from tests.support.engine_fixtures import wait_until
from tests.support.sse import carries_text, events_of, read_until

from .cluster import unreachable

pytestmark = [pytest.mark.live, pytest.mark.skipif(unreachable() is not None, reason=unreachable() or "")]
LONG = {"prompt": "A very long story", "max_new_tokens": 8000, "ignore_eos": True}


@pytest.fixture(scope="module")
def folders(long_context_llama_dir, tmp_path_factory):
    """Three folders of the same tiny weights: both models, `first` alone, `second` alone."""
    root = tmp_path_factory.mktemp("scaleout-models")
    both, first, second = root / "both", root / "first-only", root / "second-only"
    for folder, names in ((both, ("first", "second")), (first, ("first",)), (second, ("second",))):
        folder.mkdir()
        for name in names:
            os.symlink(long_context_llama_dir, folder / name)
    return {"both": str(both), "first": str(first), "second": str(second)}


@pytest.fixture(scope="module")
def web(cluster, folders):
    for name in ("first-1", "second-1", "second-2"):
        cluster.start_engine(name, MINIVLLM_MODEL="", MINIVLLM_MODELS_DIR=folders[name.split("-")[0]])
    url = cluster.start_web(MINIVLLM_MODEL="", MINIVLLM_MODELS_DIR=folders["both"])
    yield url
    for name in [name for name in list(cluster.engines) if name.startswith(("first-", "second-", "pair"))]:
        process = cluster.engines.pop(name)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def statuses(url: str) -> dict[str, str]:
    try:
        listed = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
    except (httpx.TransportError, ValueError, KeyError):
        return {}
    return {model["id"]: model["status"]["value"] for model in listed}


def generate(url: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{url}/generate", json={"model": model, "prompt": "Hi", "max_new_tokens": 3, "ignore_eos": True}, timeout=60
    )


def test_each_model_is_served_by_its_own_workers(cluster, web):
    assert wait_until(lambda: statuses(web) == {"first": "loaded", "second": "loaded"}, timeout=180), statuses(web)
    for model in ("first", "second"):
        reply = generate(web, model)
        assert reply.status_code == 200 and events_of(reply.iter_lines())[-1]["type"] == "done"
    missing = generate(web, "third")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_a_request_whose_worker_dies_resumes_on_a_worker_of_its_model(cluster, web):
    ctx = httpx.stream("POST", f"{web}/generate", json={**LONG, "model": "second"}, timeout=60)
    resp = ctx.__enter__()
    try:
        assert resp.status_code == 200, resp.read()
        lines = resp.iter_lines()
        request_id = read_until(lines, carries_text)[0]["request_id"]
        assert wait_until(lambda: cluster.holder(request_id, web) is not None, timeout=60)
        victim = cluster.holder(request_id, web)
        assert victim.startswith("second-")
        cluster.engines[victim].send_signal(signal.SIGKILL)
        assert wait_until(lambda: cluster.holder(request_id, web) not in (None, victim), timeout=60)
        survivor = cluster.holder(request_id, web)
        assert read_until(lines, carries_text)[-1]["type"] == "token"  # the same stream, still going
    finally:
        ctx.__exit__(None, None, None)
    assert survivor.startswith("second-") and survivor != victim  # never the other model's worker
    assert wait_until(lambda: cluster.row(request_id).get("status") == "aborted", timeout=60), cluster.row(request_id)
    assert [segment["engine"] for segment in cluster.row(request_id)["resumes"]] == [victim, survivor]
    assert cluster.row(request_id)["model"] == "second"


def test_one_models_workers_gone_the_other_still_serves(cluster, web):
    for name in [name for name in cluster.engines if name.startswith("second-")]:
        if cluster.engines[name].poll() is None:
            cluster.engines[name].send_signal(signal.SIGTERM)
            cluster.engines[name].wait(60)
    assert wait_until(lambda: statuses(web).get("second") == "unloaded", timeout=60)
    refused = generate(web, "second")
    assert refused.status_code == 503 and "runengine" in refused.json()["error"]["message"]
    assert generate(web, "first").status_code == 200 and statuses(web)["first"] == "loaded"


def test_one_worker_serving_both_models(cluster, web, folders):
    """A worker started with the folder: one engine per model, loaded one after the other, each
    with an id of its own, each taking its own model's requests."""
    cluster.start_engine("pair", MINIVLLM_MODEL="", MINIVLLM_MODELS_DIR=folders["both"])
    assert wait_until(lambda: statuses(web).get("second") == "loaded", timeout=180), cluster.logs()
    cluster.engines["first-1"].send_signal(signal.SIGTERM)
    cluster.engines["first-1"].wait(60)
    for model in ("first", "second"):  # both now served by the pair alone
        reply = generate(web, model)
        assert reply.status_code == 200, reply.text
        assert events_of(reply.iter_lines())[-1]["type"] == "done"
    assert statuses(web) == {"first": "loaded", "second": "loaded"}
    log = (cluster.workdir / "engine-pair.log").read_text()
    assert "engine pair-first: loading first" in log and "engine pair-second: loading second" in log
