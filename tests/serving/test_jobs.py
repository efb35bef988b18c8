"""GenerationJob: one engine request and its history row, whatever ends the response."""

import gc

import pytest

from inference.api.openai.stream_format import generate_events
from inference.engine.sample.sampling_params import SamplingParams
from inference.models import GenerationRequest
from inference.serving import submission
from inference.serving.generation_input import GenerationInput
from inference.serving.jobs import guard_stream, live_jobs
from inference.serving.submission import RequestRecord
from tests.support.engine_fixtures import async_wait_until, is_idle

pytestmark = pytest.mark.django_db(transaction=True)


async def start(engine_client, request_id, max_tokens=400):
    inp = GenerationInput(endpoint="generate", params=SamplingParams(max_tokens=max_tokens, ignore_eos=True), prompts=["Hello"])
    record = RequestRecord(request_id, "generate", "tiny", "", True, "Hello", None)
    return await submission.submit(engine_client, engine_client.model_info, record, inp, "Hello")


async def test_completed_job_records_everything(engine_client):
    job = await start(engine_client, "gen-done", max_tokens=5)
    outputs = [out async for out in job]
    await job.close()
    assert outputs[-1].finished and job.finish_reason == "length" and job not in live_jobs()
    row = await GenerationRequest.objects.aget(id="gen-done")
    assert (row.status, row.completion_tokens, row.output_text) == ("completed", 5, job.text)


async def test_response_dropped_before_streaming_is_aborted(engine_client):
    """The safety net for a response the server dropped before iterating it."""
    job = await start(engine_client, "gen-dropped")
    events = guard_stream(generate_events(job), job)
    del events
    gc.collect()
    assert await async_wait_until(lambda: job.done and job not in live_jobs())
    assert await async_wait_until(lambda: is_idle(engine_client) and engine_client.stats().kv_blocks_used == 0)
    row = await GenerationRequest.objects.aget(id="gen-dropped")
    assert row.status == "aborted" and row.error == "response dropped before streaming"


async def test_engine_shutdown_ends_job_with_abort(session_engine_client, tiny_llama_dir):
    from tests.support.engine_fixtures import start_engine_thread, tiny_engine_config

    engine_client = start_engine_thread(tiny_engine_config(tiny_llama_dir), bundle=session_engine_client.engine.bundle)
    job = await start(engine_client, "gen-shutdown")
    first = await job.__anext__()
    assert not first.finished
    engine_client.shutdown()
    rest = [out async for out in job]
    await job.close()
    assert rest[-1].finish_reason == "abort"
    row = await GenerationRequest.objects.aget(id="gen-shutdown")
    assert row.status == "aborted" and row.error == "the server is shutting down" and row.completion_tokens >= 1
