"""Constrained decoding in the engine: whatever the model prefers, a row samples only what its
grammar allows, every sampled token advances the grammar, and a complete grammar stops the row."""

import json
import re

import jsonschema
import pytest

from inference.engine.sampling_params import SamplingParams
from inference.engine.structured import GrammarError
from tests.engine.helpers import engine_for, generated_ids, run_to_completion

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


@pytest.fixture(scope="module")
def engine(tiny_hf, smollm_tokenizer):
    return engine_for(tiny_hf, smollm_tokenizer, num_kv_blocks=512)


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
