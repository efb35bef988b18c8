"""History writes: the row's lifecycle, and start-up repair of rows a crash left behind."""

import pytest

from inference import services
from inference.models import GenerationRequest

pytestmark = pytest.mark.django_db(transaction=True)


async def test_row_lifecycle_queued_running_completed():
    await services.request_create(
        request_id="cmpl-1",
        endpoint="completions",
        model="m",
        client_address="127.0.0.1",
        stream=False,
        prompt="p",
        messages=None,
        sampling_params={"max_tokens": 3},
    )
    row = await GenerationRequest.objects.aget(id="cmpl-1")
    assert row.status == "queued" and row.finished is None and row.created is not None

    await services.request_mark_running(request_id="cmpl-1", queue_time=0.01)
    assert (await GenerationRequest.objects.aget(id="cmpl-1")).status == "running"

    await services.request_finish(
        request_id="cmpl-1",
        status="completed",
        output_text="abc",
        prompt_tokens=2,
        completion_tokens=3,
        finish_reason="length",
        queue_time=0.01,
        time_to_first_token=0.02,
        latency=0.1,
    )
    row = await GenerationRequest.objects.aget(id="cmpl-1")
    assert (row.status, row.output_text, row.completion_tokens, row.finish_reason) == ("completed", "abc", 3, "length")
    assert row.finished is not None and row.latency == 0.1


async def test_mark_running_never_resurrects_a_finished_row():
    await services.request_create(
        request_id="gen-1",
        endpoint="generate",
        model="m",
        client_address="",
        stream=True,
        prompt="p",
        messages=None,
        sampling_params={},
        status="aborted",
    )
    await services.request_mark_running(request_id="gen-1", queue_time=None)
    assert (await GenerationRequest.objects.aget(id="gen-1")).status == "aborted"


def test_interrupted_rows_are_marked_failed():
    for i, status in enumerate(["queued", "running", "completed", "aborted"]):
        GenerationRequest.objects.create(id=f"gen-{i}", endpoint="generate", status=status)
    assert services.requests_fail_interrupted() == 2
    statuses = dict(GenerationRequest.objects.values_list("id", "status"))
    assert statuses == {"gen-0": "failed", "gen-1": "failed", "gen-2": "completed", "gen-3": "aborted"}
    assert GenerationRequest.objects.get(id="gen-1").error
