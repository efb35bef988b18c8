"""The real thing: Daphne in a subprocess, the official `openai` client, SIGTERM mid-stream."""

from __future__ import annotations

import signal

import httpx
import openai
import pytest

from tests.support.daphne_server import LiveServer
from tests.support.sse import carries_text, events_of, read_until

pytestmark = pytest.mark.live


def tiny_settings(model_dir: str) -> dict:
    return dict(
        MINIVLLM_MODEL=model_dir,
        MINIVLLM_DTYPE="float32",
        MINIVLLM_KV_CACHE_MB="8",
        MINIVLLM_MAX_NUM_SEQS="4",
        # a tiny model gains nothing from intra-op threads, and they crawl on a busy 2-core box
        OMP_NUM_THREADS="1",
    )


def leave_a_crashed_row(server: LiveServer) -> None:
    """A row a crashed process left "running": start-up must repair it."""
    server.manage(
        "shell",
        "-c",
        "from inference.models import GenerationRequest as G; G.objects.create(id='crashed-1', endpoint='generate', status='running')",
    )


@pytest.fixture(scope="module")
def server(tiny_llama_dir, daphne_server):
    return daphne_server(setup=leave_a_crashed_row, **tiny_settings(tiny_llama_dir))


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)


def test_startup_marks_crashed_rows_failed(server):
    assert server.row("crashed-1")["status"] == "failed"


def test_openai_client_models_and_completions(client, server):
    [model] = client.models.list().data
    whole = client.completions.create(
        model=model.id, prompt="The capital of France is", max_tokens=6, extra_body={"ignore_eos": True}
    )
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 6
    assert server.row(whole.id)["status"] == "completed"

    chunks = list(
        client.completions.create(model=model.id, prompt="Hello", max_tokens=4, stream=True, extra_body={"ignore_eos": True})
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks) == server.row(chunks[0].id)["output_text"]


def test_openai_client_chat_whole_and_streamed(client, server):
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Say hi"}]
    whole = client.chat.completions.create(
        model=model, messages=messages, max_tokens=5, temperature=0, extra_body={"ignore_eos": True}
    )
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 5

    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=5,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: same text streamed or not
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-1].choices == []


def test_openai_client_sees_api_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=client.models.list().data[0].id, prompt="x", temperature=-3)
    assert info.value.body["param"] == "temperature"


def test_sigterm_ends_in_flight_stream_and_records_it(tiny_llama_dir, daphne_server):
    live = daphne_server.fresh(**tiny_settings(tiny_llama_dir))
    try:
        body = {"prompt": "A very long story", "max_new_tokens": 480, "ignore_eos": True}
        with httpx.stream("POST", f"{live.url}/generate", json=body, timeout=60) as resp:
            lines = resp.iter_lines()
            events = read_until(lines, carries_text)
            live.process.send_signal(signal.SIGTERM)
            events += events_of(lines)
        assert events[-1]["type"] == "done" and events[-1]["finish_reason"] == "abort"
        assert live.process.wait(30) == 0
        row = live.row(events[0]["request_id"])
        assert row["status"] == "aborted" and row["finish_reason"] == "abort"
        assert 0 < row["completion_tokens"] < 480
    finally:
        live.stop()
