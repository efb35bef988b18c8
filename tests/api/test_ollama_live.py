"""Ollama's API through the official `ollama` Python client against a live Daphne: the embedded
SmolLM2 (the session's default server) for listings, chat, generate (streamed and not, raw, JSON
formats, options) and embeddings; the real Qwen2.5-Coder-0.5B for tools, a call and its result
sent back as Ollama's clients send them."""

from __future__ import annotations

import json
import math

import httpx
import ollama
import pytest

from tests.support.engine_fixtures import wait_until

pytestmark = pytest.mark.live
GREEDY = {"temperature": 0, "num_predict": 12, "seed": 1}
ASK = [{"role": "user", "content": "Name three colours."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def client(default_server):
    return ollama.Client(host=default_server.url, timeout=120)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.list().models[0].model


def test_the_listings_name_the_served_model(client, model, default_server):
    listed = client.list().models
    assert [m.model for m in listed] == [model] and listed[0].details.format == "gguf" and listed[0].size > 0
    assert [m.model for m in client.ps().models] == [model]
    shown = client.show(model)
    assert "completion" in shown.capabilities and "<|im_start|>" in shown.template
    assert httpx.get(f"{default_server.url}/api/version", timeout=10).json()["version"]


def test_chat_streamed_is_the_chat_whole(client, model):
    whole = client.chat(model=model, messages=ASK, options=GREEDY)
    assert whole.message.role == "assistant" and whole.message.content and whole.done
    assert whole.done_reason in ("stop", "length") and whole.eval_count <= 12 and whole.prompt_eval_count > 5
    chunks = list(client.chat(model=model, messages=ASK, options=GREEDY, stream=True))
    assert "".join(c.message.content for c in chunks) == whole.message.content
    assert chunks[-1].done and not any(c.done for c in chunks[:-1]) and chunks[-1].eval_count == whole.eval_count


def test_the_history_rows_name_ollamas_paths(client, model, default_server):
    client.chat(model=model, messages=ASK, options=GREEDY)
    client.generate(model=model, prompt="Hi.", options=GREEDY)

    def endpoints():
        return {row["endpoint"] for row in default_server.rows("endpoint LIKE 'ollama.%' AND status = 'completed'")}

    wait_until(lambda: endpoints() == {"ollama.chat", "ollama.generate"})  # a row is written just after its reply
    assert endpoints() == {"ollama.chat", "ollama.generate"}
    other = httpx.post(f"{default_server.url}/api/pull", json={"model": "llama3"}, timeout=10)
    assert other.status_code == 404 and "not served here" in other.json()["error"]


def test_generate_through_the_template_raw_and_streamed(client, model):
    whole = client.generate(model=model, prompt="Name three colours.", options=GREEDY)
    chat = client.chat(model=model, messages=ASK, options=GREEDY)
    assert whole.response == chat.message.content  # the prompt goes through the chat template
    streamed = "".join(
        c.response for c in client.generate(model=model, prompt="Name three colours.", options=GREEDY, stream=True)
    )
    assert streamed == whole.response
    raw = client.generate(model=model, prompt="The capital of France is", raw=True, options=GREEDY)
    assert raw.response and raw.done_reason in ("stop", "length")
    loaded = client.generate(model=model, prompt="")
    assert loaded.done and loaded.done_reason == "load"
    # no num_predict: as many as the context holds, raw too (not OpenAI completions' 16)
    counted = client.generate(model=model, prompt="1, 2, 3, 4, 5, 6,", raw=True, options={"temperature": 0, "stop": ["40"]})
    assert counted.eval_count > 16 and counted.eval_duration > 0 and counted.prompt_eval_duration >= 0


def test_options_stop_and_a_json_schema_format(client, model):
    stopped = client.chat(model=model, messages=ASK, options={**GREEDY, "num_predict": 40, "stop": [","], "num_ctx": 4096})
    assert "," not in stopped.message.content
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    formatted = client.chat(model=model, messages=ASK, format=schema, options={**GREEDY, "num_predict": 30})
    assert isinstance(json.loads(formatted.message.content)["ok"], bool)


def test_embeddings_are_unit_vectors(client, model):
    vectors = client.embed(model=model, input=["a cat", "a dog"]).embeddings
    assert len(vectors) == 2 and len(vectors[0]) == 576
    assert all(math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-4) for vector in vectors)
    older = client.embeddings(model=f"{model}:latest", prompt="a cat").embedding  # the older route, a tagged name
    assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(older, vectors[0], strict=True))


def test_tagged_names_and_go_durations_are_taken(client, model):
    reply = client.chat(model=f"{model}:latest", messages=ASK, options=GREEDY, keep_alive="1h30m")
    assert reply.done and reply.message.content
    assert client.generate(model=model, prompt="Hi.", options=GREEDY, keep_alive=-1).done


def test_bad_input_gets_ollamas_error_shape(client, model, default_server):
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="no-such-model", messages=ASK)
    assert missing.value.status_code == 404
    for path, body in (
        ("show", {"model": ["x"]}),
        ("embed", {"model": 3, "input": "a"}),
        ("generate", {"model": model, "prompt": 0}),
    ):
        odd = httpx.post(f"{default_server.url}/api/{path}", json=body, timeout=30)
        assert odd.status_code == 400 and odd.json()["error"], (path, odd.text)
    bad = httpx.post(f"{default_server.url}/api/chat", json={"model": model, "messages": ASK, "keep_alive": "soon"}, timeout=30)
    assert bad.status_code == 400 and "keep_alive" in bad.json()["error"]
    images = httpx.post(
        f"{default_server.url}/api/chat", json={"model": model, "messages": [{**ASK[0], "images": ["aGk="]}]}, timeout=30
    )
    assert images.status_code == 400 and "text only" in images.json()["error"]


def test_a_tool_call_and_its_result_round_trip(qwen_server, qwen_model):
    client = ollama.Client(host=qwen_server.url, timeout=120)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = client.chat(model=qwen_model, messages=ask, tools=[WEATHER], options={"temperature": 0, "num_predict": 60})
    [call] = called.message.tool_calls
    assert call.function.name == "get_weather" and dict(call.function.arguments) == {"city": "Paris"}
    result = {"role": "tool", "content": "Sunny, 22 C", "tool_name": "get_weather"}
    history = [*ask, {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]}, result]
    answer = client.chat(model=qwen_model, messages=history, options={"temperature": 0, "num_predict": 40})
    assert answer.message.content and not answer.message.tool_calls
    streamed = list(
        client.chat(model=qwen_model, messages=ask, tools=[WEATHER], options={"temperature": 0, "num_predict": 60}, stream=True)
    )
    calls = [c for chunk in streamed for c in chunk.message.tool_calls or []]
    assert [c.function.name for c in calls] == ["get_weather"] and streamed[-1].done
