"""Conformance with the OpenAI API reference and vLLM's documented behaviour, checked through the
official `openai` client (raw HTTP where the client cannot send the case) against a live Daphne
serving the real model. Written from the references' statements, one test per statement."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.sse import assert_error_shape

pytestmark = [pytest.mark.live, pytest.mark.real_model]
GREEDY = {"temperature": 0.0, "max_tokens": 12}
MESSAGES = [{"role": "user", "content": "Say something about the sea."}]


def test_a_greedy_stream_concatenates_to_the_whole_response(openai_client, served_model):
    whole = openai_client.completions.create(model=served_model, prompt="The ocean is", **GREEDY)
    streamed = openai_client.completions.create(model=served_model, prompt="The ocean is", stream=True, **GREEDY)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == whole.choices[0].text
    chat = openai_client.chat.completions.create(model=served_model, messages=MESSAGES, **GREEDY)
    chat_stream = openai_client.chat.completions.create(model=served_model, messages=MESSAGES, stream=True, **GREEDY)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chat_stream if chunk.choices)
    assert text == chat.choices[0].message.content


@pytest.mark.parametrize("n", [1, 3])
def test_every_index_gets_exactly_one_finish_reason(openai_client, served_model, n):
    finishes: dict[int, list[str]] = {}
    for chunk in openai_client.completions.create(
        model=served_model, prompt="Once", n=n, stream=True, seed=1, temperature=1.0, max_tokens=8
    ):
        for choice in chunk.choices:
            finishes.setdefault(choice.index, [])
            if choice.finish_reason is not None:
                finishes[choice.index].append(choice.finish_reason)
    assert sorted(finishes) == list(range(n)) and all(len(r) == 1 for r in finishes.values()), finishes
    chat_finishes: dict[int, list[str]] = {}
    for chunk in openai_client.chat.completions.create(model=served_model, messages=MESSAGES, n=n, stream=True, max_tokens=8):
        for choice in chunk.choices:
            chat_finishes.setdefault(choice.index, [])
            if choice.finish_reason is not None:
                chat_finishes[choice.index].append(choice.finish_reason)
    assert sorted(chat_finishes) == list(range(n)) and all(len(r) == 1 for r in chat_finishes.values()), chat_finishes


@pytest.mark.parametrize("include_usage", [True, False, None])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_the_usage_chunk_comes_only_when_asked_and_adds_up(openai_client, served_model, include_usage, endpoint):
    options = None if include_usage is None else {"include_usage": include_usage}
    common = dict(model=served_model, n=2, max_tokens=5, stream=True, stream_options=options, extra_body={"ignore_eos": True})
    if endpoint == "chat":
        chunks = list(openai_client.chat.completions.create(messages=MESSAGES, **common))
    else:
        chunks = list(openai_client.completions.create(prompt="The sea", **common))
    with_usage = [chunk for chunk in chunks if chunk.usage is not None]
    if not include_usage:
        assert with_usage == []
        return
    [last] = with_usage
    assert last is chunks[-1] and last.choices == []  # the extra chunk: after every choice, none of its own
    usage = last.usage
    assert usage.completion_tokens == 2 * 5 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stream_options_without_stream_is_refused(default_server):
    for path, body in (
        ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}),
        ("/v1/chat/completions", {"messages": MESSAGES, "stream": False, "stream_options": {"include_usage": True}}),
    ):
        resp = httpx.post(f"{default_server.url}{path}", json=body, timeout=30)
        assert resp.status_code == 400 and assert_error_shape(resp)["param"] == "stream_options"


def test_too_many_logprobs_are_refused_and_the_server_keeps_serving(openai_client, served_model):
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.completions.create(model=served_model, prompt="x", max_tokens=1, logprobs=21)
    assert err.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(model=served_model, messages=MESSAGES, max_tokens=1, logprobs=True, top_logprobs=21)
    assert err.value.body["param"] == "top_logprobs"
    assert openai_client.completions.create(model=served_model, prompt="Still", max_tokens=2).choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    "method, path, body, status",
    [
        ("POST", "/v1/completions", {"prompt": "x", "temperature": 9000}, 400),
        ("POST", "/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404),
        ("POST", "/v1/completions", {"prompt": "x", "n": 2, "best_of": 4}, 400),
        ("POST", "/v1/completions", {"prompt": ["a", 7]}, 400),
        ("POST", "/v1/chat/completions", {"messages": []}, 400),
        ("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 10**6}, 400),
        ("POST", "/tokenize", {"prompt": "x", "content": "y"}, 400),
        ("POST", "/detokenize", {"tokens": "abc"}, 400),
        ("GET", "/v1/completions", None, 405),
        ("GET", "/v1/unknown", None, 404),
    ],
)
def test_every_refusal_uses_the_error_envelope(default_server, method, path, body, status):
    resp = httpx.request(method, f"{default_server.url}{path}", json=body, timeout=30)
    assert resp.status_code == status, resp.text
    error = assert_error_shape(resp)
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
