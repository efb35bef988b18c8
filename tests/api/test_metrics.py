"""GET /metrics: Prometheus text format, parsed with prometheus_client's own parser; counters and
histograms move by exactly what real requests through the tiny engine did."""

import json

import pytest
from asgiref.testing import ApplicationCommunicator
from prometheus_client.parser import text_string_to_metric_families

from inference.serving import runtime
from minivllm_site.asgi import application
from tests.support.asgi import http_scope, post
from tests.support.engine_fixtures import async_wait_until, is_idle
from tests.support.sse import events_of_chunks, read_stream

pytestmark = pytest.mark.django_db(transaction=True)

ENGINE_GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
ENGINE_COUNTERS = ("prompt_tokens", "generation_tokens", "num_preemptions", "prefix_cache_queries", "prefix_cache_hits")
# written for this test alone, so no earlier request of the session has left its blocks in the prefix cache
SHARED_PROMPT = (
    "Metrics check, prompt seven: the lighthouse keeper counts gulls, boats, waves and stars over the "
    "harbour each night, and writes every number into a blue notebook kept beside the lamp."
)
REQUEST_HISTOGRAMS = (
    "time_to_first_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prompt_tokens",
    "request_generation_tokens",
)


def parse(text: str) -> dict:
    """{family name: family}, plus {(sample name, sorted labels): value} under the key "samples"."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    return {"families": families, "samples": samples}


MISSING = object()


def value(scrape: dict, name: str, default=MISSING, **labels) -> float:
    """A sample's value; a sample the scrape lacks fails the test unless a default is given."""
    key = ("minivllm:" + name, tuple(sorted(labels.items())))
    if key not in scrape["samples"]:
        assert default is not MISSING, f"/metrics has no sample {name}{labels}"
        return default
    return scrape["samples"][key]


async def scrape(async_client) -> dict:
    resp = await async_client.get("/metrics")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/plain")
    return parse(resp.content.decode())


def test_metrics_without_engine(client, no_engine):
    resp = client.get("/metrics")
    assert resp.status_code == 200
    families = parse(resp.content.decode())["families"]
    # request metrics are declared; engine numbers are absent rather than invented
    assert families["minivllm:e2e_request_latency_seconds"].type == "histogram"
    assert families["minivllm:request_success"].type == "counter"
    assert not any(f"minivllm:{name}" in families for name in ENGINE_GAUGES + ENGINE_COUNTERS)


def test_metrics_rejects_post(client, no_engine):
    assert client.post("/metrics").status_code == 405


async def test_counters_and_histograms_move_after_real_requests(async_client, engine_client):
    model = runtime.served_model_name(engine_client.model_info)
    before = await scrape(async_client)

    usages = []
    resp = await post(async_client, "/v1/completions", {"prompt": SHARED_PROMPT, "max_tokens": 5, "ignore_eos": True})
    usages.append(resp.json()["usage"])
    resp = await post(  # the same prompt again: its full blocks come from the prefix cache
        async_client,
        "/v1/completions",
        {"prompt": SHARED_PROMPT, "max_tokens": 4, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}},
    )
    usages.append((await read_stream(resp))[-2]["usage"])
    resp = await post(async_client, "/generate", {"prompt": "Hello there", "max_new_tokens": 6, "ignore_eos": True})
    usages.append((await read_stream(resp))[-1]["usage"])

    assert await async_wait_until(lambda: is_idle(engine_client))  # the engine snapshot has the last step
    after = await scrape(async_client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, default=0.0, **labels)  # absent before its first request

    completion = sum(u["completion_tokens"] for u in usages)
    prompt = sum(u["prompt_tokens"] for u in usages)
    assert completion == 15
    assert delta("generation_tokens_total", model_name=model) == completion
    assert delta("prompt_tokens_total", model_name=model) == prompt
    assert delta("request_success_total", model_name=model, finished_reason="length") == 3
    for name in REQUEST_HISTOGRAMS:
        assert delta(f"{name}_count", model_name=model) == 3, name
    assert delta("request_generation_tokens_sum", model_name=model) == completion
    assert delta("request_prompt_tokens_sum", model_name=model) == prompt
    # one output per generated token: each request has (tokens - 1) gaps between them
    assert delta("inter_token_latency_seconds_count", model_name=model) == completion - len(usages)
    assert delta("e2e_request_latency_seconds_bucket", model_name=model, le="+Inf") == 3
    # the prefix cache looks up a prompt's full blocks (all but the last token's) in order, up to the
    # first miss: the new prompt misses its first block, the repeat finds every one, "Hello there" has none
    block_size = engine_client.engine.config.block_size
    shared_blocks = (usages[0]["prompt_tokens"] - 1) // block_size
    assert shared_blocks >= 2 and usages[1]["prompt_tokens"] == usages[0]["prompt_tokens"]
    assert usages[2]["prompt_tokens"] <= block_size
    assert delta("prefix_cache_queries_total", model_name=model) == 1 + shared_blocks
    assert delta("prefix_cache_hits_total", model_name=model) == shared_blocks
    assert delta("num_preemptions_total", model_name=model) == 0  # three short requests on an ample pool

    families = after["families"]
    for name in ENGINE_GAUGES:
        assert families[f"minivllm:{name}"].type == "gauge"
    for name in ENGINE_COUNTERS:
        assert families[f"minivllm:{name}"].type == "counter"
    assert value(after, "num_requests_running", model_name=model) == 0
    assert value(after, "num_requests_waiting", model_name=model) == 0
    assert 0 <= value(after, "kv_cache_usage_perc", model_name=model) <= 1


async def test_disconnect_counts_as_abort(async_client, engine_client):
    model = runtime.served_model_name(engine_client.model_info)
    before = await scrape(async_client)

    comm = ApplicationCommunicator(application, http_scope("/generate"))
    body = {"prompt": "Tell me a long story", "max_new_tokens": 400, "ignore_eos": True}
    await comm.send_input({"type": "http.request", "body": json.dumps(body).encode(), "more_body": False})
    assert (await comm.receive_output(timeout=30))["status"] == 200
    chunks = []
    while len(events_of_chunks(chunks)) < 3:  # start and a couple of tokens
        chunks.append((await comm.receive_output(timeout=30))["body"])
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=30)
    assert await async_wait_until(lambda: is_idle(engine_client))

    after = await scrape(async_client)
    assert (
        value(after, "request_success_total", model_name=model, finished_reason="abort")
        - value(before, "request_success_total", default=0.0, model_name=model, finished_reason="abort")
        == 1
    )
    assert (
        value(after, "e2e_request_latency_seconds_count", model_name=model)
        - value(before, "e2e_request_latency_seconds_count", default=0.0, model_name=model)
        == 1
    )
    generated = value(after, "request_generation_tokens_sum", model_name=model) - value(
        before, "request_generation_tokens_sum", default=0.0, model_name=model
    )
    assert 0 < generated < 400
