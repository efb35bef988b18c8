"""OpenAI-compatible API: response shapes, streamed and whole, through the real engine."""

import pytest

from inference.models import GenerationRequest
from tests.support.asgi import post
from tests.support.sse import read_stream

pytestmark = pytest.mark.django_db(transaction=True)


async def test_models_lists_the_served_model(async_client, engine_client):
    resp = await async_client.get("/v1/models")
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "list"
    [model] = body["data"]
    assert model["object"] == "model" and model["id"] == engine_client.engine.model_name
    assert model["max_model_len"] == engine_client.engine.max_model_len
    assert model["architecture"] == "llama, full attention"  # the tiny Llama, its float32 weights and cache
    assert model["weights"] == "float32; KV float32"


async def test_completion_whole(async_client, engine_client):
    resp = await post(
        async_client,
        "/v1/completions",
        {"model": engine_client.engine.model_name, "prompt": "The sky is", "max_tokens": 5, "temperature": 0, "ignore_eos": True},
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    assert body["model"] == engine_client.engine.model_name and isinstance(body["created"], int)
    [choice] = body["choices"]
    assert choice["index"] == 0 and isinstance(choice["text"], str)
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    usage = body["usage"]
    assert usage["completion_tokens"] == 5 and usage["total_tokens"] == usage["prompt_tokens"] + 5
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert row.status == "completed" and row.output_text == choice["text"] and not row.stream


async def test_completion_stream_with_usage(async_client, engine_client):
    resp = await post(
        async_client,
        "/v1/completions",
        {
            "prompt": "The sky is",
            "max_tokens": 4,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/event-stream")
    events = await read_stream(resp)
    assert events[-1] == "[DONE]"
    *chunks, usage_chunk, _ = events
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_continuous_usage_counts_the_tokens_each_chunk_brings(async_client, engine_client, path):
    """vLLM's stream_options.continuous_usage_stats: every chunk carries the counts so far, so a
    client times tokens, not chunks (a chunk may bring several, or a token no text)."""
    fields = {"prompt": "The sky is"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    stream_options = {"include_usage": True, "continuous_usage_stats": True}
    body = {**fields, "max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": stream_options}
    events = await read_stream(await post(async_client, path, body))
    *chunks, last, done = events
    assert done == "[DONE]" and last["choices"] == [] and last["usage"]["completion_tokens"] == 6
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 6  # each chunk: the tokens written so far
    assert all(c["usage"]["prompt_tokens"] == last["usage"]["prompt_tokens"] > 0 for c in chunks)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_continuous_usage_streams_a_chunk_for_a_token_without_text(async_client, engine_client, path):
    """A token that adds no text yet (here the first byte of a four-byte character, forced by
    logit_bias) still gets its own chunk under continuous usage, so a client counting tokens by
    the usage times it when it came (llama-server streams an empty chunk for it too)."""
    lead_byte = engine_client.engine.tokenizer.convert_tokens_to_ids("\u00f0")  # byte 0xF0 in byte-level BPE
    assert isinstance(lead_byte, int) and lead_byte != engine_client.engine.tokenizer.unk_token_id
    fields = {"prompt": "The sky is"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    stream_options = {"include_usage": True, "continuous_usage_stats": True}
    body = {**fields, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True}
    body |= {"stream_options": stream_options, "logit_bias": {str(lead_byte): 100}}
    *chunks, last, done = await read_stream(await post(async_client, path, body))
    assert done == "[DONE]" and last["usage"]["completion_tokens"] == 4
    counted = [c["usage"]["completion_tokens"] for c in chunks if c["usage"]["completion_tokens"]]
    assert counted[:4] == [1, 2, 3, 4]  # one chunk a token, though none of the four made a character


async def test_completion_stream_without_usage_ends_with_done(async_client, engine_client):
    resp = await post(async_client, "/v1/completions", {"prompt": "A", "max_tokens": 2, "ignore_eos": True, "stream": True})
    events = await read_stream(resp)
    assert events[-1] == "[DONE]"
    assert all(e["choices"] for e in events[:-1])


async def test_completion_logprobs_shape(async_client, engine_client):
    resp = await post(
        async_client, "/v1/completions", {"prompt": "A", "max_tokens": 3, "temperature": 0, "logprobs": 2, "ignore_eos": True}
    )
    logprobs = resp.json()["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["top_logprobs"]) == 3
    assert all(len(top) <= 2 for top in logprobs["top_logprobs"])


async def test_chat_whole_uses_the_chat_template(async_client, engine_client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    resp = await post(
        async_client,
        "/v1/chat/completions",
        {"model": engine_client.engine.model_name, "messages": messages, "max_tokens": 5, "ignore_eos": True},
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 5
    row = await GenerationRequest.objects.aget(id=body["id"])
    expected = engine_client.engine.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert row.prompt == expected and row.messages == messages and row.endpoint == "chat.completions"


async def test_chat_stream_shape(async_client, engine_client):
    resp = await post(
        async_client,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "max_completion_tokens": 4,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = await read_stream(resp)
    assert events[-1] == "[DONE]"
    first, *middle, finish, usage_chunk, _ = events
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(set(c["choices"][0]["delta"]) == {"content"} for c in middle)
    assert finish["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length", "stop_reason": None}
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 4


async def test_chat_without_max_tokens_fills_the_context(async_client, engine_client):
    resp = await post(
        async_client,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "stop": ["e", "a", "o", " "]},
    )
    assert resp.status_code == 200
    body = resp.json()
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert row.sampling_params["max_tokens"] == engine_client.engine.max_model_len - body["usage"]["prompt_tokens"]


async def test_chat_logprobs_shape(async_client, engine_client):
    resp = await post(
        async_client,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2,
            "logprobs": True,
            "top_logprobs": 3,
            "ignore_eos": True,
        },
    )
    content = resp.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 2
    assert all({"token", "logprob", "bytes", "top_logprobs"} <= set(item) and len(item["top_logprobs"]) == 3 for item in content)


async def test_a_model_without_a_chat_template_answers_completions_and_says_why_chat_cannot(
    async_client, engine_client, settings, monkeypatch
):
    """A base GGUF carries no template (Gemma 3 270M's): chat is a 400 naming what is missing, on
    every chat API, until the server is given one; completions answer all along."""
    monkeypatch.setattr(engine_client.engine.tokenizer, "chat_template", None)
    messages = [{"role": "user", "content": "Hi"}]
    for path, body in [
        ("/v1/chat/completions", {"messages": messages, "max_tokens": 2}),
        ("/v1/messages", {"model": engine_client.engine.model_name, "messages": messages, "max_tokens": 2}),
        ("/v1/responses", {"input": "Hi", "max_output_tokens": 2}),
    ]:
        resp = await post(async_client, path, body)
        assert resp.status_code == 400, (path, resp.content)
        assert "no chat template" in resp.content.decode() and "MINIVLLM_CHAT_TEMPLATE" in resp.content.decode()
    resp = await post(async_client, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert resp.status_code == 200, resp.content
    settings.MINIVLLM_CHAT_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    resp = await post(async_client, "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    assert resp.status_code == 200, resp.content
    row = await GenerationRequest.objects.aget(id=resp.json()["id"])
    assert row.prompt == "<user>Hi<assistant>"
