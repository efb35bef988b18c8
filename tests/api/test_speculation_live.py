"""Speculative decoding as a client sees it, on the session's default server (speculation `auto`):
OpenAI's Predicted Outputs through the official client, the counts in usage, the history row,
/stats and /metrics."""

from __future__ import annotations

import httpx
import pytest

from tests.support.engine_fixtures import wait_until
from tests.support.sse import assert_error_shape

pytestmark = [pytest.mark.live, pytest.mark.real_model]

PASSAGE = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, trimmed the wick, polished the "
    "great lens and wrote the weather in a leather log book that his father had kept before him."
)


def ask(served_model, **extra) -> dict:
    return dict(
        model=served_model,
        messages=[{"role": "user", "content": f"Repeat the following text exactly.\n\n{PASSAGE}"}],
        temperature=0,
        max_tokens=60,
        **extra,
    )


def test_a_prediction_speeds_the_reply_up_without_changing_it(openai_client, served_model, default_server):
    plain = openai_client.chat.completions.create(**ask(served_model))
    predicted = openai_client.chat.completions.create(**ask(served_model, prediction={"type": "content", "content": PASSAGE}))
    assert predicted.choices[0].message.content == plain.choices[0].message.content
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 10  # the reply repeats the passage: most of it was guessed right
    assert details.rejected_prediction_tokens >= 0
    spec = predicted.usage.model_extra["spec_decode"]
    assert spec["num_accepted_tokens"] >= details.accepted_prediction_tokens
    assert spec["num_draft_tokens"] >= spec["num_accepted_tokens"]
    row = default_server.wait_row(predicted.id)
    assert (row["spec_draft_tokens"], row["spec_accepted_tokens"]) == (spec["num_draft_tokens"], spec["num_accepted_tokens"])
    # /stats and /metrics count it too (the snapshot is refreshed each loop pass)
    assert wait_until(lambda: (default_server.stats()["spec_accepted_tokens"] or 0) >= spec["num_accepted_tokens"], timeout=30)
    stats = default_server.stats()
    assert stats["speculative"] == "auto" and 0 < stats["spec_acceptance_rate"] <= 1 and stats["spec_tokens_per_step"] > 1
    metrics = httpx.get(f"{default_server.url}/metrics", timeout=10).text
    accepted = [line for line in metrics.splitlines() if line.startswith("minivllm:spec_decode_num_accepted_tokens_total")]
    assert accepted and float(accepted[0].split()[-1]) >= spec["num_accepted_tokens"]


def test_a_streamed_reply_with_a_prediction_reports_its_counts_in_the_usage_chunk(openai_client, served_model):
    prediction = {"type": "content", "content": [{"type": "text", "text": PASSAGE}]}  # content as parts
    stream = openai_client.chat.completions.create(
        **ask(served_model, prediction=prediction), stream=True, stream_options={"include_usage": True}
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
    assert PASSAGE[:40] in text
    assert usage.completion_tokens_details.accepted_prediction_tokens > 10


@pytest.mark.parametrize(
    "prediction",
    [{"type": "text", "content": "x"}, {"type": "content", "content": 5}, {"type": "content", "content": "x", "extra": 1}, "x"],
)
def test_a_malformed_prediction_is_a_400_naming_it(default_server, served_model, prediction):
    body = ask(served_model, prediction=prediction)
    resp = httpx.post(f"{default_server.url}/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 400
    assert assert_error_shape(resp)["param"] == "prediction"
