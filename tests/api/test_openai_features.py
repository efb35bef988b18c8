"""n, batched prompts, echo, logit_bias, tokenize and the rest, as a user of the official `openai`
client sees them: a live Daphne serving the real model (the session's default server)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.engine_fixtures import wait_until
from tests.support.servers import idle
from tests.support.sse import assert_error_shape, events_of

pytestmark = [pytest.mark.live, pytest.mark.real_model]
PROMPT = "Write a short story about a lighthouse keeper who collects lost maps in a quiet harbour town."


def stats(default_server) -> dict:
    return httpx.get(f"{default_server.url}/stats", timeout=10).json()


def test_n_choices_are_reproducible_and_the_prompt_is_prefilled_once(openai_client, served_model, default_server):
    before = stats(default_server)
    ask = dict(model=served_model, prompt=PROMPT, n=3, seed=7, max_tokens=12, temperature=1.0, extra_body={"ignore_eos": True})
    first = openai_client.completions.create(**ask)
    # /stats is a snapshot shared for a fraction of a second: wait until it has seen the tokens
    assert wait_until(
        lambda: stats(default_server)["total_tokens_generated"] >= before["total_tokens_generated"] + 36, timeout=30
    )
    after = stats(default_server)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert len({c.text for c in first.choices}) > 1  # three draws, not one copied
    assert first.usage.completion_tokens == 3 * 12  # summed over the choices
    # the prompt counts once in usage and in the engine: three completions, one prefill
    assert after["total_prompt_tokens"] - before["total_prompt_tokens"] == first.usage.prompt_tokens
    assert after["prefix_cache_queries"] - before["prefix_cache_queries"] == (first.usage.prompt_tokens - 1) // 16
    again = openai_client.completions.create(**ask)
    assert [c.text for c in again.choices] == [c.text for c in first.choices]
    # the prompt's full blocks were cached by the first request: usage says how many tokens it served
    assert again.usage.prompt_tokens_details.cached_tokens >= 16
    row = default_server.wait_row(first.id)  # one history row, every choice in it
    assert [c["text"] for c in json.loads(row["choices"])] == [c.text for c in first.choices]


def test_n_streams_every_index_to_exactly_one_finish(openai_client, served_model):
    ask = {
        "model": served_model,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "n": 2,
        "seed": 3,
        "max_tokens": 10,
        "temperature": 0.8,
    }
    whole = openai_client.chat.completions.create(**ask)
    stream = openai_client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True})
    texts, finishes, usage = {0: "", 1: ""}, {0: [], 1: []}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                finishes[choice.index].append(choice.finish_reason)
    assert all(len(reasons) == 1 for reasons in finishes.values()), finishes
    assert [texts[0], texts[1]] == [c.message.content for c in whole.choices]  # the same seeds, the same draws
    assert usage.completion_tokens == whole.usage.completion_tokens and usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_disconnect_aborts_every_child_and_frees_every_block(default_server):
    body = {"prompt": PROMPT, "n": 3, "max_tokens": 400, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{default_server.url}/v1/completions", json=body, timeout=60) as resp:
        seen, request_id = set(), None
        lines = resp.iter_lines()  # held: a dropped line iterator closes the response (a disconnect too early)
        for line in lines:
            for event in events_of([line]):
                seen.update(c["index"] for c in event["choices"])
                request_id = event["id"]
            if len(seen) == 3:  # every child is decoding
                break
        holding = lambda: sum(1 for slot in stats(default_server)["slots"] if slot["request_id"] == request_id)  # noqa: E731
        assert wait_until(lambda: holding() == 3, timeout=30)  # three slots, one request
    assert wait_until(lambda: idle(default_server), timeout=60), stats(default_server)
    row = default_server.wait_row(request_id)
    assert row["status"] == "aborted"


def test_a_batch_of_prompts_times_n_comes_back_in_order(openai_client, served_model):
    prompts = ["The capital of France is", "Two plus two equals"]
    no_eos = {"ignore_eos": True}
    batch = openai_client.completions.create(
        model=served_model, prompt=prompts, n=2, max_tokens=6, temperature=0.0, extra_body=no_eos
    )
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    for position, prompt in enumerate(prompts):
        alone = openai_client.completions.create(
            model=served_model, prompt=prompt, max_tokens=6, temperature=0.0, extra_body=no_eos
        )
        alone = alone.choices[0].text
        assert [c.text for c in batch.choices[position * 2 : position * 2 + 2]] == [alone, alone]
    assert batch.usage.completion_tokens == 4 * 6


def test_echo_with_and_without_logprobs(openai_client, served_model):
    plain = openai_client.completions.create(model=served_model, prompt="Hello world", echo=True, max_tokens=3, temperature=0.0)
    bare = openai_client.completions.create(model=served_model, prompt="Hello world", max_tokens=3, temperature=0.0)
    assert plain.choices[0].text == "Hello world" + bare.choices[0].text
    scored = openai_client.completions.create(
        model=served_model, prompt="Hello world", echo=True, max_tokens=3, temperature=0.0, logprobs=2
    )
    lp = scored.choices[0].logprobs
    assert len(lp.tokens) == scored.usage.prompt_tokens + 3
    assert lp.token_logprobs[0] is None and all(v <= 0 for v in lp.token_logprobs[1:])
    assert lp.top_logprobs[0] is None and all(len(top) >= 1 for top in lp.top_logprobs[1:])
    assert "".join(lp.tokens) == scored.choices[0].text and lp.text_offset[0] == 0
    assert lp.text_offset == sorted(lp.text_offset)
    assert getattr(scored.choices[0], "prompt_logprobs", None) is None  # only when asked for by name
    streamed = openai_client.completions.create(
        model=served_model, prompt="Hello world", echo=True, max_tokens=3, temperature=0.0, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in streamed) == plain.choices[0].text


def test_logit_bias_forces_and_bans_a_token(openai_client, served_model, default_server):
    banana = httpx.post(f"{default_server.url}/tokenize", json={"prompt": " banana"}, timeout=10).json()["tokens"]
    assert len(banana) == 1
    forced = openai_client.completions.create(
        model=served_model,
        prompt="My favourite colour is",
        max_tokens=3,
        temperature=0.0,
        logit_bias={str(banana[0]): 100},
    )
    assert forced.choices[0].text == " banana" * 3
    first = openai_client.completions.create(
        model=served_model, prompt="My favourite colour is", max_tokens=1, temperature=0.0, logprobs=0
    )
    top = first.choices[0].logprobs.tokens[0]
    top_id = httpx.post(f"{default_server.url}/tokenize", json={"prompt": top}, timeout=10).json()["tokens"][0]
    banned = openai_client.completions.create(
        model=served_model, prompt="My favourite colour is", max_tokens=1, temperature=0.0, logit_bias={str(top_id): -100}
    )
    assert banned.choices[0].text != top
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.completions.create(model=served_model, prompt="x", max_tokens=1, logit_bias={"999999": 1})
    assert err.value.body["param"] == "logit_bias"


def test_tokenize_and_detokenize_round_trip_in_both_shapes(default_server, served_model):
    text = "Tokenize me, twice: café ☕"
    vllm = httpx.post(f"{default_server.url}/tokenize", json={"model": served_model, "prompt": text}, timeout=10).json()
    assert vllm["count"] == len(vllm["tokens"]) and vllm["max_model_len"] > 0
    back = httpx.post(
        f"{default_server.url}/detokenize", json={"model": served_model, "tokens": vllm["tokens"]}, timeout=10
    ).json()
    assert back["prompt"] == text
    llama = httpx.post(f"{default_server.url}/tokenize", json={"content": text, "with_pieces": True}, timeout=10).json()
    assert [t["id"] for t in llama["tokens"]] == vllm["tokens"]
    assert httpx.post(f"{default_server.url}/detokenize", json={"tokens": vllm["tokens"]}, timeout=10).json()["content"] == text
    chat = httpx.post(f"{default_server.url}/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}, timeout=10).json()
    completion = httpx.post(
        f"{default_server.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
        timeout=60,
    ).json()
    assert chat["count"] == completion["usage"]["prompt_tokens"]  # the count a chat request holds
    bad = httpx.post(f"{default_server.url}/detokenize", json={"tokens": [10**7]}, timeout=10)
    assert bad.status_code == 400 and assert_error_shape(bad)["param"] == "tokens"


def test_models_by_id_empty_model_names_and_unknown_paths(openai_client, served_model, default_server):
    assert openai_client.models.retrieve(served_model).id == served_model
    with pytest.raises(openai.NotFoundError):
        openai_client.models.retrieve("no-such-model")
    assert openai_client.completions.create(model="", prompt="Hi", max_tokens=1).model == served_model
    for path in ("/v1/engines", "/v1/audio/speech", "/v1/no/such/route"):
        resp = httpx.post(f"{default_server.url}{path}", json={}, timeout=10)
        assert resp.status_code == 404 and resp.headers["content-type"] == "application/json"
        assert_error_shape(resp)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/generate", '{"prompt": "\\ud800"}'),
        ("/v1/completions", '{"prompt": "\\ud800"}'),
        ("/v1/completions", '{"prompt": ["ok", "bad \\udc00"]}'),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud83d"}]}'),
        ("/tokenize", '{"prompt": "\\ud800"}'),
    ],
)
def test_unpaired_surrogates_are_a_400_naming_the_field(default_server, path, body):
    resp = httpx.post(f"{default_server.url}{path}", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert resp.status_code == 400, resp.text
    assert assert_error_shape(resp)["code"] == "invalid_unicode"
    assert httpx.get(f"{default_server.url}/health", timeout=10).status_code == 200
