"""Every field real clients send: the documented ones are accepted (honoured where they apply,
else ignored with one log line per name), an undocumented name is still a 400 naming it, a bad
value of a known field is still a 400; llama-server's aliases; echo with max_tokens 0."""

import logging

import pytest

from inference.api.common import extra_fields
from inference.models import GenerationRequest
from tests.support.asgi import post

pytestmark = pytest.mark.django_db(transaction=True)
MSGS = [{"role": "user", "content": "Hi there"}]
# What current OpenAI clients, agent frameworks and chat front-ends send (issue 31, part 7)
CLIENT_FIELDS = {
    "reasoning_effort": "low",
    "verbosity": "low",
    "prompt_cache_key": "user-42",
    "safety_identifier": "hash-42",
    "prediction": {"type": "content", "content": "Hello"},
    "modalities": ["text"],
    "web_search_options": {},
    "chat_template_kwargs": {"enable_thinking": False},
    "cache_prompt": True,
    "id_slot": 0,
    "store": False,
    "metadata": {"a": "b"},
    "service_tier": "auto",
}


async def test_the_fields_clients_send_are_accepted_on_chat(async_client, engine_client):
    resp = await post(async_client, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 2, **CLIENT_FIELDS})
    assert resp.status_code == 200, resp.content
    assert resp.json()["choices"][0]["message"]["role"] == "assistant"


async def test_llama_servers_and_vllms_fields_are_accepted_on_completions(async_client, engine_client):
    fields = {"cache_prompt": True, "id_slot": -1, "n_probs": 0, "typical_p": 1.0, "skip_special_tokens": True, "priority": 0}
    resp = await post(async_client, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, **fields})
    assert resp.status_code == 200, resp.content


async def test_an_ignored_field_is_logged_once_per_name(async_client, engine_client, caplog, monkeypatch):
    monkeypatch.setattr(extra_fields, "_logged", set())  # once per process: start as a fresh one would
    caplog.set_level(logging.INFO, logger="inference.api")
    for _ in range(2):
        fields = {"prompt": "Hi", "max_tokens": 1, "mirostat_tau": 5.0, "mirostat_eta": 0.1}
        resp = await post(async_client, "/v1/completions", fields)
        assert resp.status_code == 200, resp.content
    for name in ("mirostat_tau", "mirostat_eta"):
        lines = [r for r in caplog.records if r.name == "inference.api" and repr(name) in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in caplog.records]
        assert "accepted and ignored" in lines[0].getMessage()


@pytest.mark.parametrize(
    "path, fields, param",
    [
        ("/v1/chat/completions", {"temprature": 0.5}, "temprature"),
        ("/v1/completions", {"max_token": 3}, "max_token"),
        ("/v1/chat/completions", {"prompt_cache_key": 5}, "prompt_cache_key"),
        ("/v1/chat/completions", {"reasoning_effort": "extreme"}, "reasoning_effort"),
        ("/v1/chat/completions", {"modalities": ["text", "audio"]}, "modalities"),
        ("/v1/chat/completions", {"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ("/v1/chat/completions", {"cache_prompt": "yes"}, "cache_prompt"),
        ("/v1/chat/completions", {"use_beam_search": True}, "use_beam_search"),
        ("/v1/chat/completions", {"bad_words": ["sea"]}, "bad_words"),  # a constraint we cannot apply
        ("/v1/completions", {"user": 5}, "user"),
        ("/v1/chat/completions", {"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs"),
        ("/v1/chat/completions", {"chat_template": "{{ 1 }}"}, "chat_template"),  # not trusted by default
        ("/v1/completions", {"n_predict": 3, "max_tokens": 4}, "n_predict"),
        ("/v1/completions", {"max_tokens": 0}, "max_tokens"),  # max_tokens 0 only with echo
        ("/v1/completions", {"structured_outputs": {"json": 5}}, "structured_outputs.json"),
    ],
)
async def test_unknown_names_and_bad_values_are_400s_naming_the_field(async_client, engine_client, path, fields, param):
    body = {"messages": MSGS} if "chat" in path else {"prompt": "Hi"}
    resp = await post(
        async_client, path, {**body, "max_tokens": 2, **fields} if "max_tokens" not in fields else {**body, **fields}
    )
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["param"] == param


async def test_a_trusted_chat_template_and_its_kwargs_reach_the_template(async_client, engine_client, settings):
    settings.MINIVLLM_TRUST_REQUEST_CHAT_TEMPLATE = True
    broken = {"messages": MSGS, "max_tokens": 1, "chat_template": "{% for m in messages %}"}
    resp = await post(async_client, "/v1/chat/completions", broken)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"  # a template that fails to render
    template = "{% for m in messages %}[{{ m.content }}]{% endfor %}<{{ flavour }}|{{ reasoning_effort }}>"
    resp = await post(
        async_client,
        "/v1/chat/completions",
        {
            "messages": MSGS,
            "max_tokens": 1,
            "chat_template": template,
            "chat_template_kwargs": {"flavour": "mango"},
            "reasoning_effort": "high",
        },
    )
    assert resp.status_code == 200, resp.content
    row = await GenerationRequest.objects.aget(id=resp.json()["id"])
    assert row.prompt == "[Hi there]<mango|high>"


async def test_continue_final_message_leaves_the_last_turn_open(async_client, engine_client):
    messages = [*MSGS, {"role": "assistant", "content": "Well, I"}]
    body = {"messages": messages, "max_tokens": 1, "continue_final_message": True, "add_generation_prompt": False}
    resp = await post(async_client, "/v1/chat/completions", body)
    row = await GenerationRequest.objects.aget(id=resp.json()["id"])
    assert row.prompt.endswith("Well, I")


async def test_llama_server_aliases_are_read_as_the_fields_they_name(async_client, engine_client):
    resp = await post(
        async_client, "/v1/completions", {"prompt": "Hi", "n_predict": 3, "repeat_penalty": 1.3, "ignore_eos": True}
    )
    body = resp.json()
    assert body["usage"]["completion_tokens"] == 3
    row = await GenerationRequest.objects.aget(id=body["id"])
    assert row.sampling_params["repetition_penalty"] == 1.3


async def test_vllms_structured_outputs_constrain_the_reply(async_client, engine_client):
    body = {"prompt": "Answer:", "max_tokens": 5, "structured_outputs": {"choice": ["yes", "no"]}}
    resp = await post(async_client, "/v1/completions", body)
    assert resp.status_code == 200, resp.content
    assert resp.json()["choices"][0]["text"] in ("yes", "no")


@pytest.mark.parametrize("stream", [False, True])
async def test_echo_with_max_tokens_0_returns_the_prompt_scored_and_nothing_generated(async_client, engine_client, stream):
    prompt = "The cat sat on the mat"
    body = {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1, "stream": stream}
    resp = await post(async_client, "/v1/completions", body)
    assert resp.status_code == 200, resp.content
    if stream:
        from tests.support.sse import read_stream

        chunks = [c for c in await read_stream(resp) if c != "[DONE]"]
        text = "".join(c["choices"][0]["text"] for c in chunks)
        tokens = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["token_logprobs"]]
    else:
        choice = resp.json()["choices"][0]
        text, tokens = choice["text"], choice["logprobs"]["token_logprobs"]
        assert resp.json()["usage"]["completion_tokens"] == 0
    assert text == prompt
    scored = await post(async_client, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0})
    expected = [None] + [next(iter(p.values()))["logprob"] for p in scored.json()["choices"][0]["prompt_logprobs"][1:]]
    assert tokens[0] is None and tokens[1:] == pytest.approx(expected[1:], abs=1e-4)
    assert len(tokens) == len(expected)
