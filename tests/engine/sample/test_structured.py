"""Constrained decoding in the engine: whatever the model prefers, a row samples only what its
grammar allows, every sampled token advances the grammar, and a complete grammar stops the row."""

import json
import re
import threading

import jsonschema
import pytest

from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sample.structured import GrammarError
from tests.support.engine_helpers import generated_ids, run_to_completion

SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["red", "green", "blue"]},
        "bright": {"type": "boolean"},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["colour", "bright", "count"],
    "additionalProperties": False,
}


def run(engine, rid, structured, **params):
    params = {"max_tokens": 60, "temperature": 0.0, **params}
    engine.add_request(rid, engine.tokenize("Answer:"), SamplingParams(structured=structured, **params))
    outputs = run_to_completion(engine)[rid]
    return "".join(out.text for out in outputs), outputs[-1]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_random_model_still_writes_what_the_grammar_allows(engine, temperature):
    text, last = run(
        engine, f"choice-{temperature}", {"kind": "choice", "value": ["yes", "no", "maybe"]}, temperature=temperature
    )
    assert text in ("yes", "no", "maybe") and last.finish_reason == "stop"
    text, last = run(
        engine, f"regex-{temperature}", {"kind": "regex", "value": "[0-9]{3}-[a-z]{2}"}, temperature=temperature, seed=4
    )
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", text) and last.finish_reason == "stop"
    text, last = run(engine, f"schema-{temperature}", {"kind": "json_schema", "value": SCHEMA}, temperature=temperature, seed=4)
    jsonschema.validate(json.loads(text), SCHEMA)
    assert last.finish_reason == "stop"


def test_a_constrained_row_leaves_its_batch_neighbours_alone(engine):
    """Batched with an unconstrained request, each gives the tokens it gives alone."""
    prompt = engine.tokenize("Answer:")
    constrained = SamplingParams(max_tokens=40, temperature=0.0, structured={"kind": "json_schema", "value": SCHEMA})
    free = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    alone = {}
    for rid, params in (("c", constrained), ("f", free)):
        engine.add_request(rid, prompt, params)
        alone[rid] = generated_ids(run_to_completion(engine)[rid])
    engine.add_request("c2", prompt, constrained)
    engine.add_request("f2", prompt, free)
    together = run_to_completion(engine)
    assert generated_ids(together["c2"]) == alone["c"] and generated_ids(together["f2"]) == alone["f"]


def test_every_fork_follows_the_grammar(engine):
    engine.add_request(
        "n",
        engine.tokenize("Pick:"),
        SamplingParams(max_tokens=40, temperature=1.0, seed=2, n=3, structured={"kind": "json_schema", "value": SCHEMA}),
    )
    texts: dict[int, str] = {}
    for out in run_to_completion(engine)["n"]:
        texts[out.index] = texts.get(out.index, "") + out.text
    assert sorted(texts) == [0, 1, 2]
    for text in texts.values():
        jsonschema.validate(json.loads(text), SCHEMA)


def test_a_cut_off_constrained_output_says_length(engine):
    text, last = run(engine, "cut", {"kind": "json_schema", "value": SCHEMA}, max_tokens=3)
    assert last.finish_reason == "length" and len(last.token_ids) == 1


@pytest.mark.parametrize(
    "spec, param",
    [
        ({"kind": "json_schema", "value": {"type": "object", "properties": 5}, "param": "response_format"}, "response_format"),
        ({"kind": "regex", "value": "(", "param": "guided_regex"}, "guided_regex"),
        ({"kind": "grammar", "value": "root ::= (", "param": "guided_grammar"}, "guided_grammar"),
    ],
)
def test_an_invalid_grammar_is_refused_naming_its_field(engine, spec, param):
    with pytest.raises(GrammarError) as err:
        engine.grammars.compile(spec)
    assert err.value.param == param and param in err.value.message


def test_masks_are_computed_while_the_model_runs(engine, monkeypatch):
    """The forward pass waits, inside itself, for the step's mask to be done: that only ends if the
    mask was started before the forward (on the mask thread), not computed after it."""
    grammars = engine.grammars
    mask_done = threading.Event()
    compute = grammars.allowed

    def allowed(matchers):
        try:
            return compute(matchers)
        finally:
            if threading.current_thread().name.startswith("grammar-masks"):
                mask_done.set()

    run_model = engine.model_runner.run

    def run_after_the_mask(batch):
        assert mask_done.wait(timeout=60), "the step's mask was not being computed during the forward pass"
        mask_done.clear()  # the next step's mask starts only after this step's forward
        return run_model(batch)

    monkeypatch.setattr(grammars, "allowed", allowed)
    monkeypatch.setattr(engine.model_runner, "run", run_after_the_mask)
    before = engine.stats()
    params = SamplingParams(max_tokens=60, temperature=0.0, structured={"kind": "json_schema", "value": SCHEMA})
    engine.add_request("overlap", engine.tokenize("Answer:"), params)
    outputs = run_to_completion(engine)["overlap"]
    jsonschema.validate(json.loads("".join(out.text for out in outputs)), SCHEMA)
    after = engine.stats()  # one mask per sampled token, all of them from the mask thread
    assert after.grammar_mask_rows - before.grammar_mask_rows == len(generated_ids(outputs))


def test_a_failed_step_with_masks_in_flight_fails_only_its_requests(engine):
    def fail_once():
        engine.test_faults.step = None
        raise RuntimeError("injected")

    engine.add_request(
        "doomed", engine.tokenize("Answer:"), SamplingParams(max_tokens=20, structured={"kind": "json_schema", "value": SCHEMA})
    )
    engine.test_faults.step = fail_once
    assert run_to_completion(engine)["doomed"][-1].finish_reason == "error"
    text, last = run(engine, "after", {"kind": "json_schema", "value": SCHEMA})  # the next request is served
    jsonschema.validate(json.loads(text), SCHEMA)
    assert last.finish_reason == "stop"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_sampled_object_keeps_to_its_listed_keys(engine, seed):
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}}}
    text, last = run(engine, f"keys-{seed}", {"kind": "json_schema", "value": schema}, temperature=1.0, seed=seed)
    assert last.finish_reason == "stop" and set(json.loads(text)) <= {"a", "b"}, text


ORDERED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "country": {"type": "string", "maxLength": 8},
        "where": {
            "type": "object",
            "properties": {"zone": {"type": "boolean"}, "area": {"type": "boolean"}},
            "required": ["zone", "area"],
        },
        "parts": {
            "type": "array",
            "items": {"type": "object", "properties": {"y": {"type": "boolean"}, "b": {"type": "null"}}, "required": ["y", "b"]},
            "maxItems": 2,
        },
    },
    "required": ["name", "country", "where", "parts"],
}


def keys_in_order(value, schema) -> bool:
    """Whether every object in `value` has its keys in the order its schema lists them."""
    if isinstance(value, dict):
        listed = list(schema["properties"])
        return list(value) == [key for key in listed if key in value] and all(
            keys_in_order(value[key], schema["properties"][key]) for key in value
        )
    if isinstance(value, list):
        return all(keys_in_order(item, schema["items"]) for item in value)
    return True


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_object_keeps_the_schemas_key_order(engine, seed):
    """Nested objects and arrays of objects too, whatever a random model prefers."""
    text, last = run(
        engine, f"order-{seed}", {"kind": "json_schema", "value": ORDERED}, max_tokens=120, temperature=1.0, seed=seed
    )
    assert last.finish_reason == "stop", text
    assert keys_in_order(json.loads(text), ORDERED), text
