"""Structured outputs through the API, on the real model: response_format and vLLM's guided_*
fields, as the official `openai` client sends them, always give output that parses and validates."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.support.json_prefix import is_json_prefix
from tests.support.sse import assert_error_shape, events_of

pytestmark = [pytest.mark.live, pytest.mark.real_model]
ASK = [{"role": "user", "content": "Describe a city as JSON."}]


class Place(BaseModel):
    """Issue 29's schema: its properties are not in alphabetical order."""

    name: str
    country: str
    population: int
    kind: str


@pytest.mark.parametrize("prompt", ["Describe Paris as JSON.", "Give me a made-up town.", "Tokyo?"])
def test_parse_ends_with_the_schemas_keys_in_order_and_numbers_that_end(openai_client, served_model, prompt):
    """Greedy, this model once wrote `"population":21000000000000…` until max_tokens, with the keys
    sorted; the grammar now keeps the schema's order and bounds the integer's digits."""
    reply = openai_client.chat.completions.parse(
        model=served_model, messages=[{"role": "user", "content": prompt}], response_format=Place, max_tokens=200, temperature=0.0
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Place), choice.message.content
    assert list(json.loads(choice.message.content)) == ["name", "country", "population", "kind"]
    assert abs(choice.message.parsed.population) <= 2**53 - 1


def test_a_schema_that_asks_for_reasoning_first_gets_it_first(openai_client, served_model):
    schema = {
        "type": "object",
        "properties": {"reasoning": {"type": "string", "maxLength": 200}, "answer": {"type": "integer"}},
        "required": ["reasoning", "answer"],
    }
    reply = openai_client.chat.completions.create(
        model=served_model,
        messages=[{"role": "user", "content": "What is 17*23? Think, then answer."}],
        response_format={"type": "json_schema", "json_schema": {"name": "worked", "schema": schema}},
        max_tokens=160,
        temperature=0.0,
    )
    assert reply.choices[0].message.content.startswith('{"reasoning":"'), reply.choices[0].message.content


def test_json_object_mode_always_parses(openai_client, served_model):
    """json_object mode bounds numbers but not nesting or length, so a sampled reply may run to
    max_tokens: each reply is then either a whole object that stopped by itself or one cut by
    max_tokens that is still the start of an object. Of these seeds, 0 and 4 stop (after 12 and 6
    tokens) and 2 is cut, so both kinds are checked on every run."""
    finishes = []
    for seed in (0, 2, 4):
        reply = openai_client.chat.completions.create(
            model=served_model,
            messages=ASK,
            response_format={"type": "json_object"},
            max_tokens=150,
            temperature=1.0,
            seed=seed,
        )
        choice = reply.choices[0]
        text = choice.message.content
        finishes.append(choice.finish_reason)
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(text), dict), text
        else:
            assert choice.finish_reason == "length" and reply.usage.completion_tokens == 150, choice.finish_reason
            assert text.startswith("{") and is_json_prefix(text), text
    assert "stop" in finishes, finishes  # at least one reply ended its object


def test_guided_fields_on_completions_and_generate(openai_client, served_model, default_server):
    choice = openai_client.completions.create(
        model=served_model, prompt="Is the sea wet? Answer:", max_tokens=5, extra_body={"guided_choice": ["yes", "no"]}
    )
    assert choice.choices[0].text in ("yes", "no")
    date = openai_client.completions.create(
        model=served_model, prompt="A date:", max_tokens=20, extra_body={"guided_regex": "20[0-9]{2}-[01][0-9]-[0-3][0-9]"}
    )
    assert re.fullmatch("20[0-9]{2}-[01][0-9]-[0-3][0-9]", date.choices[0].text)
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "code": {"type": "integer"}},  # not in alphabetical order
        "required": ["ok", "code"],
        "additionalProperties": False,
    }
    with httpx.stream(
        "POST", f"{default_server.url}/generate", json={"prompt": "Status:", "json_schema": schema}, timeout=60
    ) as resp:
        events = events_of(resp.iter_lines())
    text = "".join(e.get("text", "") for e in events if e["type"] == "token")
    jsonschema.validate(json.loads(text), schema)
    assert list(json.loads(text)) == ["ok", "code"]
    streamed = openai_client.chat.completions.create(
        model=served_model,
        messages=ASK,
        max_tokens=120,
        stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": schema}},
    )
    jsonschema.validate(json.loads("".join(c.choices[0].delta.content or "" for c in streamed if c.choices)), schema)


@pytest.mark.parametrize(
    "path, body, param",
    [
        (
            "/v1/chat/completions",
            {
                "messages": ASK,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "object", "properties": 5}},
                },
            },
            "response_format",
        ),
        ("/v1/chat/completions", {"messages": ASK, "response_format": {"type": "yaml"}}, "response_format"),
        ("/v1/completions", {"prompt": "x", "guided_regex": "("}, "guided_regex"),
        ("/v1/completions", {"prompt": "x", "guided_choice": []}, "guided_choice"),
        ("/v1/completions", {"prompt": "x", "guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
        ("/generate", {"prompt": "x", "grammar": "root ::= ("}, "grammar"),
    ],
)
def test_an_invalid_constraint_is_a_400_naming_it_and_the_server_keeps_serving(default_server, path, body, param):
    resp = httpx.post(f"{default_server.url}{path}", json=body, timeout=30)
    assert resp.status_code == 400, resp.text
    assert assert_error_shape(resp)["param"] == param
    assert httpx.get(f"{default_server.url}/health", timeout=10).status_code == 200


# Random schemas: objects with nested properties, enums, bounded arrays, required fields, patterns.
leaf = st.one_of(
    st.just({"type": "boolean"}),
    st.builds(lambda lo: {"type": "integer", "minimum": lo, "maximum": lo + 50}, st.integers(-20, 20)),
    st.builds(
        lambda items: {"enum": items},
        st.lists(st.sampled_from(["red", "green", "blue", "x", "y"]), min_size=1, max_size=3, unique=True),
    ),
    st.just({"type": "string", "pattern": "^[a-z]{1,6}$"}),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(1, 12)),
)
node = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda items, hi: {"type": "array", "items": items, "minItems": 0, "maxItems": hi}, inner, st.integers(1, 3)),
        st.builds(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": sorted(props)[: max(1, len(props) // 2)],
                "additionalProperties": False,
            },
            st.dictionaries(st.sampled_from(["a", "b", "c", "name", "value"]), inner, min_size=1, max_size=3),
        ),
    ),
    max_leaves=6,
)
schemas = st.builds(
    lambda props: {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False},
    st.dictionaries(st.sampled_from(["id", "kind", "items", "meta"]), node, min_size=1, max_size=3),
)


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(schema=schemas, temperature=st.sampled_from([0.0, 0.9]))
def test_every_completion_under_a_random_schema_validates(openai_client, served_model, schema, temperature):
    reply = openai_client.chat.completions.create(
        model=served_model,
        messages=ASK,
        max_tokens=400,  # more than any of these bounded schemas needs
        temperature=temperature,
        seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "random", "schema": schema, "strict": True}},
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", (schema, choice.message.content)  # the grammar completed
    jsonschema.validate(json.loads(choice.message.content), schema)
