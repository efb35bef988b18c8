"""GenerationJob: one engine request and its history row, whatever ends the response."""

import gc

import pytest

from inference.api.stream_renderers import generate_events
from inference.api.validation import GenerationInput
from inference.engine.sampling_params import SamplingParams
from inference.models import GenerationRequest
from inference.serving.jobs import GenerationJob, guard_stream, live_jobs
from tests.serving.engine_fixtures import async_wait_until, is_idle

pytestmark = pytest.mark.django_db(transaction=True)


def start(runner, request_id, max_tokens=400):
    inp = GenerationInput(endpoint="generate", params=SamplingParams(max_tokens=max_tokens, ignore_eos=True), prompt="Hello")
    return GenerationJob.start(
        runner=runner, request_id=request_id, inp=inp, prompt="Hello", prompt_text="Hello", model="tiny", client_address=""
    )


async def test_completed_job_records_everything(runner):
    job = start(runner, "gen-done", max_tokens=5)
    outputs = [out async for out in job]
    await job.close()
    assert outputs[-1].finished and job.finish_reason == "length" and job not in live_jobs()
    row = await GenerationRequest.objects.aget(id="gen-done")
    assert (row.status, row.completion_tokens, row.output_text) == ("completed", 5, job.text)


async def test_response_dropped_before_streaming_is_aborted(runner):
    """The safety net for a response the server dropped before iterating it."""
    job = start(runner, "gen-dropped")
    events = guard_stream(generate_events(job), job)
    del events
    gc.collect()
    assert await async_wait_until(lambda: job.done and job not in live_jobs())
    assert await async_wait_until(lambda: is_idle(runner) and runner.stats()["kv_blocks_used"] == 0)
    row = await GenerationRequest.objects.aget(id="gen-dropped")
    assert row.status == "aborted" and row.error == "response dropped before streaming"


async def test_engine_shutdown_ends_job_with_abort(session_runner, tiny_llama_dir):
    from tests.serving.engine_fixtures import start_runner, tiny_engine_config

    runner = start_runner(tiny_engine_config(tiny_llama_dir), bundle=session_runner.engine.bundle)
    job = start(runner, "gen-shutdown")
    first = await job.__anext__()
    assert not first.finished
    runner.shutdown()
    rest = [out async for out in job]
    await job.close()
    assert rest[-1].finish_reason == "abort"
    row = await GenerationRequest.objects.aget(id="gen-shutdown")
    assert row.status == "aborted" and row.error == "the server is shutting down" and row.completion_tokens >= 1
