"""Fuzzing request validation on a live server with hypothesis: random JSON, wrong types, huge and
negative numbers, non-UTF-8 bytes, enormous strings. Never a 500, always the error shape on a
refusal, and the server healthy afterwards. Accepted requests are cheap: the server caps
max_tokens at 64 (conftest)."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.conftest import bearer
from tests.support.engine_fixtures import wait_until
from tests.support.sse import assert_error_shape

pytestmark = [pytest.mark.live, pytest.mark.real_model]

PATHS = [
    "/generate",
    "/v1/completions",
    "/v1/chat/completions",
    "/tokenize",
    "/detokenize",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/responses/input_tokens",
    "/v1/embeddings",
    "/infill",
]
ANTHROPIC_PATHS = {"/v1/messages", "/v1/messages/count_tokens"}
FIELDS = [
    "prompt",
    "messages",
    "max_tokens",
    "max_new_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "model",
    "ignore_eos",
    "min_tokens",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "echo",
    "best_of",
    "response_format",
    "tools",
    "tool_choice",
    "user",
    "prompt_logprobs",
    "include_stop_str_in_output",
    "content",
    "tokens",
    "with_pieces",
    "add_special_tokens",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "json_schema",
    "grammar",
    "reasoning_effort",
    "chat_template_kwargs",
    "chat_template",
    "structured_outputs",
    "n_predict",
    "repeat_penalty",
    "modalities",
    "cache_prompt",
    "prompt_cache_key",
    "continue_final_message",
    "add_generation_prompt",
    "system",
    "stop_sequences",
    "thinking",
    "output_config",
    "input",
    "instructions",
    "previous_response_id",
    "max_output_tokens",
    "text",
    "reasoning",
    "encoding_format",
    "dimensions",
    "input_prefix",
    "input_suffix",
    "input_extra",
    "suffix",
]
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 2**31, 2**63, 1e308, -1e308, 0.5]),
)
text = st.one_of(st.text(max_size=40), st.sampled_from(["", "\x00", "\ud7ff", "Hi", "</s>", "<|im_end|>"]))
# strings holding half a surrogate pair: JSON can escape them ("\ud800"), UTF-8 cannot carry them
surrogate_text = st.builds(
    lambda head, half, tail: head + half + tail,
    st.text(max_size=8),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=8),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)), max_leaves=12
)
# content blocks of every kind the chat and Anthropic paths read, with fields of any type
BLOCK_TYPES = ["text", "tool_use", "tool_result", "thinking", "image"]
BLOCK_FIELDS = {name: json_values for name in ("text", "id", "name", "input", "tool_use_id", "content", "is_error")}
message = st.fixed_dictionaries(
    {
        "role": st.one_of(st.sampled_from(["user", "system", "assistant", "tool", "developer"]), json_values),
        "content": st.one_of(
            text,
            json_values,
            st.lists(st.fixed_dictionaries({"type": st.sampled_from(BLOCK_TYPES)}, optional=BLOCK_FIELDS), max_size=3),
        ),
    }
)
field_values = {
    "prompt": st.one_of(
        text,
        st.lists(st.integers(min_value=-5, max_value=60000), max_size=6),
        st.lists(st.one_of(text, st.lists(st.integers(min_value=-2, max_value=60000), max_size=4)), max_size=4),
        json_values,
    ),
    "messages": st.one_of(st.lists(message, min_size=0, max_size=3), json_values),
    "stop": st.one_of(text, st.lists(text, max_size=6), json_values),
    "n": st.one_of(st.integers(min_value=-2, max_value=20), json_values),
    "best_of": st.one_of(st.integers(min_value=-2, max_value=20), json_values),
    "logit_bias": st.one_of(
        st.dictionaries(st.one_of(st.integers(min_value=-3, max_value=10**6).map(str), text), numbers, max_size=4), json_values
    ),
    "tokens": st.one_of(st.lists(st.integers(min_value=-5, max_value=10**6), max_size=6), json_values),
}
bodies = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6),
    st.fixed_dictionaries(
        {},
        optional={name: field_values.get(name, json_values) for name in FIELDS},
    ),
    json_values,
)
raw_bodies = st.one_of(
    st.binary(max_size=200),  # mostly not UTF-8, not JSON
    st.builds(lambda b: b'{"max_tokens": 2, "prompt": "' + b + b'"}', st.binary(min_size=1, max_size=20)),
    st.sampled_from([b"", b"{", b"[]", b"null", b'{"prompt": NaN}', b'{"prompt": Infinity}', b"[" * 5000, b'{"a":' * 3000]),
)
huge = st.sampled_from(
    [
        {"prompt": "x" * (2 * 1024 * 1024)},  # over the body limit
        {"prompt": "word " * 150_000},  # under it, far over the token limit
        {"prompt": "Hi", "stop": ["y" * 200_000]},
        {"messages": [{"role": "user", "content": "z" * 900_000}]},
        {"prompt": "Hi", "max_tokens": 10**400},
        {"prompt": "Hi", "seed": -(10**30), "temperature": 1e308},
    ]
)


def check(resp: httpx.Response) -> None:
    """Never a 500; a refusal in its API's error shape (Anthropic's on its paths)."""
    assert resp.status_code < 500, (resp.status_code, resp.text[:500])
    if resp.status_code >= 400 and resp.request.url.path in ANTHROPIC_PATHS:
        body = resp.json()
        assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"], body
    elif resp.status_code >= 400:
        assert_error_shape(resp)


@pytest.fixture(scope="module")
def client(secured):
    with httpx.Client(base_url=secured.url, headers=bearer(secured.keys.env), timeout=120) as client:
        yield client
    assert httpx.get(f"{secured.url}/health", timeout=10).status_code == 200


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FUZZ
@pytest.mark.timeout(600)
@given(path=st.sampled_from(PATHS), body=bodies)
def test_json_bodies(client, path, body):
    check(
        client.post(
            path,
            content=json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass"),
            headers={"Content-Type": "application/json"},
        )
    )


escaped = st.fixed_dictionaries(
    {},
    optional={
        "prompt": st.one_of(surrogate_text, st.lists(surrogate_text, min_size=1, max_size=3)),
        "messages": st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": surrogate_text}), min_size=1, max_size=2),
        "stop": st.lists(surrogate_text, min_size=1, max_size=2),
        "model": surrogate_text,
        "content": surrogate_text,
        "logit_bias": st.dictionaries(surrogate_text, numbers, min_size=1, max_size=2),
    },
).filter(bool)


@settings(FUZZ, max_examples=60)
@pytest.mark.timeout(600)
@given(path=st.sampled_from(PATHS), body=escaped)
def test_unpaired_surrogates_escaped_in_json_are_a_400(client, path, body):
    """JSON's \\uXXXX escapes can carry half a surrogate pair, which no endpoint can encode."""
    resp = client.post(path, content=json.dumps(body).encode("ascii"), headers={"Content-Type": "application/json"})
    check(resp)
    assert resp.status_code == 400, resp.text


@settings(FUZZ, max_examples=60)
@pytest.mark.timeout(600)
@given(
    path=st.sampled_from(PATHS),
    raw=raw_bodies,
    content_type=st.sampled_from(["application/json", "text/plain", "", "application/x+json"]),
)
def test_raw_bytes(client, path, raw, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    check(client.post(path, content=raw, headers=headers))


@settings(FUZZ, max_examples=12)
@given(path=st.sampled_from(PATHS), body=huge)
def test_enormous_values(client, path, body):
    check(client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}))


def test_healthy_and_idle_after(secured):
    assert httpx.get(f"{secured.url}/health", timeout=10).status_code == 200
    assert wait_until(lambda: secured.stats(bearer(secured.keys.env))["kv_blocks_used"] == 0, timeout=60)
