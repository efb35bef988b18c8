"""Tool calls that always parse (engine/sample/tool_trigger.py): under tool_choice "auto" a reply
stays free until it opens a call (the family's tag anywhere, a `{` or a ```json fence opening the
answer), and is held to the call's grammar from there; a `{` or a fence that turns out to be JSON
meant as the answer is let go.

The trigger's state machine is read with real tokenizers (SmolLM2's, where `<tool_call>` is five
ordinary tokens, and Qwen2.5's, where it is one added token); then the engine runs the embedded
SmolLM2 with the tools prompt the chat API renders: a first token pushed to `{{` is drawn again
as a `{`, a reply that opens with prose is the same, byte for byte, with the trigger as without
it, and a watched seeded reply resumed after its engine died writes the rest token for token."""

from __future__ import annotations

import dataclasses
import json

import pytest

from inference.api.common.chat_template import render
from inference.api.common.tool_calls import ToolRequest
from inference.api.common.tool_parsers import HermesToolParser, Llama3JsonToolParser
from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sample.tool_trigger import ToolTrigger
from tests.support import real_gguf
from tests.support.engine_helpers import run_to_completion
from tests.support.grammar_checks import accepts_ids, grammars_for

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The current weather in a city.", "parameters": PARAMETERS},
}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def tools(tokenizer=None) -> ToolRequest:
    parser = HermesToolParser()
    return ToolRequest([WEATHER], "auto", False, parser.bind(tokenizer) if tokenizer is not None else parser)


def trigger_for(tokenizer, request: ToolRequest | None = None) -> ToolTrigger:
    spec = (request or tools(tokenizer)).trigger()
    return ToolTrigger(
        spec,
        lambda token_id: tokenizer.decode([token_id], skip_special_tokens=False),
        lambda text: tokenizer.encode(text, add_special_tokens=False),
    )


def replay(trigger: ToolTrigger, ids: list[int]) -> tuple[int | None, list[int] | None]:
    """Writes the tokens one by one as the engine does: (how many were written when a call
    opened, the tokens the matcher is fed), or (None, None)."""
    for written in range(1, len(ids) + 1):
        opening = trigger.observe(ids[:written])
        if opening is not None:
            return written, opening
    return None, None


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from inference.engine.gguf.checkpoint import GGUFCheckpoint

    return GGUFCheckpoint.open(str(real_gguf.QWEN25_CODER.file_or_skip())).tokenizer


def accepts(grammars, spec: dict, ids: list[int]) -> bool:
    matcher = grammars.matcher(spec)
    return all(matcher.consume_token(token_id) for token_id in ids)


# -- the state machine, on real tokenizers -------------------------------------------------


def test_a_tag_anywhere_opens_the_call_from_the_tag_on(smollm_tokenizer, engine):
    text = "Let me look that up. <tool_call>\n" + CALL + "</tool_call>"
    ids = encode(smollm_tokenizer, text)
    trigger = trigger_for(smollm_tokenizer)
    written, opening = replay(trigger, ids)
    seen = smollm_tokenizer.decode(ids[:written])
    assert seen.endswith("<tool_call>")  # the tag's last token opened it
    assert smollm_tokenizer.decode(opening) == "<tool_call>" and trigger.opened_by == "tag" and not trigger.armed
    spec = tools().trigger()["grammar"]
    engine.grammars.compile(spec)
    assert accepts(engine.grammars, spec, opening + encode(smollm_tokenizer, "\n" + CALL.replace(" ", "") + "</tool_call>"))


def test_a_tag_that_is_one_added_token_is_written_and_fed_as_that_token(qwen_tokenizer):
    tag = encode(qwen_tokenizer, "<tool_call>")
    assert len(tag) == 1 and tag[0] in qwen_tokenizer.added_tokens_decoder
    request = tools(qwen_tokenizer)
    assert f"<[{tag[0]}]>" in request.trigger()["grammar"]["value"]  # the grammar names the token, not its text
    ids = encode(qwen_tokenizer, "Sure.\n<tool_call>\n" + CALL + "\n</tool_call>")
    written, opening = replay(trigger_for(qwen_tokenizer, request), ids)
    assert ids[written - 1] == tag[0] and opening == tag


def test_a_brace_opening_the_answer_opens_a_bare_call(smollm_tokenizer):
    trigger = trigger_for(smollm_tokenizer)
    double, brace, spaced = (encode(smollm_tokenizer, text) for text in ("{{", "{", " {"))
    assert len(double) == len(brace) == len(spaced) == 1
    assert trigger.at_start and trigger.opens_bare(double[0]) and trigger.opens_bare(spaced[0])
    newline = encode(smollm_tokenizer, "\n")
    assert trigger.observe(newline) is None and trigger.at_start  # blanks: the answer has not started
    assert trigger.opens_bare(brace[0])
    # a `{` written without being drawn again (it came before the trigger could act) opens it too
    assert trigger.observe(newline + brace) == newline + brace and trigger.opened_by == "brace"


def test_a_json_fence_opening_the_answer_opens_the_call(smollm_tokenizer, engine):
    text = "```json\n" + CALL + "\n```"
    ids = encode(smollm_tokenizer, text)
    trigger = trigger_for(smollm_tokenizer)
    assert not trigger.opens_bare(ids[0])  # a fence is not drawn again: its first token may still open ```python
    written, opening = replay(trigger, ids)
    assert smollm_tokenizer.decode(ids[:written]) == "```json" and opening == ids[:written] and trigger.opened_by == "fence"
    spec = tools().trigger()["grammar"]
    engine.grammars.compile(spec)
    assert accepts(engine.grammars, spec, opening + encode(smollm_tokenizer, "\n" + CALL.replace(" ", "") + "\n```"))


def test_a_python_fence_stays_prose_and_a_later_tag_still_opens_a_call(smollm_tokenizer):
    prose = "```python\nprint({'a': 1})\n```\n"
    ids = encode(smollm_tokenizer, prose)
    trigger = trigger_for(smollm_tokenizer)
    assert replay(trigger, ids) == (None, None)
    assert trigger.armed and not trigger.at_start
    ids += encode(smollm_tokenizer, "<tool_call>" + CALL + "</tool_call>")
    written, opening = replay(trigger, ids)
    assert smollm_tokenizer.decode(opening) == "<tool_call>"


def test_a_prose_reply_never_opens_a_call(smollm_tokenizer):
    text = 'The weather in Paris is mild. As JSON: {"city": "Paris"} or `{"a": 1}`; <tool_ call> is not a tag.'
    ids = encode(smollm_tokenizer, text)
    trigger = trigger_for(smollm_tokenizer)
    assert not trigger.opens_bare(ids[0])
    assert replay(trigger, ids) == (None, None) and trigger.armed and not trigger.at_start
    assert not trigger.opens_bare(encode(smollm_tokenizer, "{")[0])  # a brace opens a call only at the start


def test_a_family_without_bare_calls_opens_only_at_its_tag(smollm_tokenizer):
    spec = {**tools().trigger(), "bare": False}
    trigger = ToolTrigger(spec, lambda t: smollm_tokenizer.decode([t]), lambda s: encode(smollm_tokenizer, s))
    ids = encode(smollm_tokenizer, CALL)
    assert not trigger.opens_bare(ids[0]) and replay(trigger, ids) == (None, None)


def test_the_setting_off_or_another_choice_asks_for_no_trigger(settings):
    assert tools().trigger() is not None
    assert dataclasses.replace(tools(), choice="required").trigger() is None
    settings.MINIVLLM_TOOL_CALL_GRAMMAR = False
    assert tools().trigger() is None


# -- the engine, on the embedded SmolLM2 ----------------------------------------------------

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def smollm_engine():
    """The embedded SmolLM2-135M (real weights), as the server runs it."""
    return LLMEngine(EngineConfig(device="cpu", kv_cache_mb=32, max_num_seqs=4))


def reply(engine: LLMEngine, rid: str, *, trigger: bool = True, messages=ASK, **params) -> tuple[str, list[int], str]:
    """(text, token ids, finish reason) of the chat request the API would run: the tools in the
    prompt, greedy, with the tool-call trigger (as tool_choice "auto" asks) or without it."""
    request = tools(engine.tokenizer)
    prompt = render(engine.tokenizer, messages, tools=request.tools, tool_parser=request.parser)
    spec = request.trigger() if trigger else None
    if spec is not None:
        engine.grammars.compile(spec["grammar"])  # as the request path does, off the loop
    engine.add_request(rid, engine.tokenize(prompt), SamplingParams(temperature=0.0, tool_trigger=spec, **params))
    outputs = run_to_completion(engine)[rid]
    return "".join(out.text for out in outputs), [t for out in outputs for t in out.token_ids], outputs[-1].finish_reason


def test_a_first_token_pushed_to_double_braces_is_drawn_again_as_one_brace(smollm_engine):
    """`{{` biased to be the first token: without the trigger the reply is braces to max_tokens;
    with it the first token is drawn again among the `{` tokens the grammar allows, and the
    model's own JSON decides: the 135M writes `{"name": "Paris", ...}`, naming no offered
    function, so the reply goes on free as content (the real 0.5B's call is held to a valid one:
    tests/api/test_tools_qwen.py)."""
    double = encode(smollm_engine.tokenizer, "{{")[0]
    params = dict(max_tokens=40, logit_bias={double: 10.0})
    free, free_ids, _ = reply(smollm_engine, "braces-free", trigger=False, **params)
    assert free_ids[0] == double and tools().read_calls(free)[1] == []
    text, ids, finish = reply(smollm_engine, "braces", **params)
    assert ids[0] != double and text.startswith("{") and not text.startswith("{{")
    assert '"name": "Paris"' in text and tools().read_calls(text) == (text, [])


def test_a_reply_that_opens_with_prose_is_the_same_with_the_trigger_as_without(smollm_engine):
    the = encode(smollm_engine.tokenizer, "The")[0]
    params = dict(max_tokens=40, logit_bias={the: 5.0})
    on = reply(smollm_engine, "prose-on", **params)
    off = reply(smollm_engine, "prose-off", trigger=False, **params)
    assert on == off and on[1][0] == the and tools().read_calls(on[0])[1] == []


def test_the_constraint_starts_after_the_reasoning_block(smollm_engine):
    """A reply that starts in reasoning (budget 3, then `</think>` forced): the braces inside the
    block stay as written; the answer's first token, `{{` again, is drawn again as a `{`."""
    double = encode(smollm_engine.tokenizer, "{{")[0]
    params = dict(max_tokens=60, logit_bias={double: 10.0}, reasoning={"end": "</think>", "budget": 3})
    text, ids, finish = reply(smollm_engine, "reasoning", **params)
    thought, answer = text.split("</think>")
    assert thought == "{{" * 3
    assert answer.lstrip().startswith("{") and not answer.lstrip().startswith("{{"), answer


def test_a_watched_reply_speculates_and_writes_what_an_unwatched_one_does(smollm_engine):
    """The trigger watches a prose reply while n-gram guesses are verified (a guess stops before a
    tag's last token: tests/engine/spec_decode/test_proposer.py holds a reply that opens a call):
    the reply is the same, and guesses were proposed, watched or not."""
    smollm_engine.speculator.mode = "ngram"  # guess wherever the lookup finds something
    try:
        messages = [{"role": "user", "content": "Write the words one two three, ten times over."}]
        outputs = {}
        for trigger in (True, False):
            request = tools(smollm_engine.tokenizer)
            prompt = render(smollm_engine.tokenizer, messages, tools=request.tools, tool_parser=request.parser)
            spec = request.trigger() if trigger else None
            rid = f"guesses-{trigger}"
            smollm_engine.add_request(
                rid, smollm_engine.tokenize(prompt), SamplingParams(temperature=0.0, max_tokens=48, tool_trigger=spec)
            )
            outputs[trigger] = run_to_completion(smollm_engine)[rid]
    finally:
        smollm_engine.speculator.mode = "auto"
    watched, free = outputs[True], outputs[False]
    assert watched[-1].spec_draft_tokens > 0 and free[-1].spec_draft_tokens > 0
    assert [t for out in watched for t in out.token_ids] == [t for out in free for t in out.token_ids]


# -- a `{` or a fence that is JSON meant as the answer --------------------------------------

JSON_ANSWERS = {
    "object": '{"city": "Paris", "temperature_c": 18}',
    "call-shaped, another function": '{"name": "Book", "arguments": {"title": "Dune"}}',
    "pretty-printed": '{\n  "title": "Dune",\n  "pages": 412\n}',
    "fenced list": '```json\n["apple", "banana"]\n```',
    "fenced object": '```json\n{"name": "Tom", "age": 3}\n```\nTom is a cat.',
}


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return grammars_for(smollm_tokenizer)


def calls_for(parser_class) -> tuple[ToolRequest, str]:
    """A request under auto in `parser_class`'s format, and its call to get_weather as its models write it."""
    parser = parser_class()
    key = "parameters" if parser_class is Llama3JsonToolParser else "arguments"
    return ToolRequest([WEATHER], "auto", False, parser), json.dumps({"name": "get_weather", key: {"city": "Paris"}})


def decided(tokenizer, grammars, request: ToolRequest, text: str) -> tuple[str | None, str | None]:
    """`text` written token by token as the engine writes it under the trigger: (how a call opened,
    or None; what it settled as: "other" where the trigger let the reply go free again, JSON that
    is not a call, "call" where a whole call was written, None while it may still be either)."""
    spec = request.trigger()
    trigger = ToolTrigger(spec, lambda t: tokenizer.decode([t]), lambda s: encode(tokenizer, s))
    ids, how, settled = encode(tokenizer, text), None, None
    for written in range(1, len(ids) + 1):
        opening = trigger.observe(ids[:written])
        settled = trigger.settled or settled
        if settled == "other":
            return how, settled
        if opening is not None:
            how = trigger.opened_by
            calls = grammars.matcher(spec["calls"])
            assert all(calls.consume_token(t) for t in opening)
            trigger.opened(how, calls)
    return how, settled


@pytest.mark.parametrize("parser_class", [HermesToolParser, Llama3JsonToolParser])
@pytest.mark.parametrize("answer", JSON_ANSWERS.values(), ids=JSON_ANSWERS.keys())
def test_json_meant_as_the_answer_opens_no_call(smollm_tokenizer, grammars, parser_class, answer):
    """Both JSON families: the grammar takes the answer as it is (no token is masked away), and
    the trigger lets the reply go free as soon as it no longer fits a call."""
    request, _ = calls_for(parser_class)
    spec = request.trigger()
    prefix = answer.split("\n```")[0] if answer.startswith("```") else answer
    matcher = grammars.matcher(spec["grammar"])
    ids = encode(smollm_tokenizer, prefix)
    assert matcher.validate_tokens(ids) == len(ids)  # every token of it allowed under the union
    how, settled = decided(smollm_tokenizer, grammars, request, answer)
    assert how in ("brace", "fence") and settled == "other"


@pytest.mark.parametrize("parser_class", [HermesToolParser, Llama3JsonToolParser])
@pytest.mark.parametrize("fenced", [False, True])
def test_a_call_opened_by_a_brace_or_a_fence_stays_a_call(smollm_tokenizer, grammars, parser_class, fenced):
    request, call = calls_for(parser_class)
    text = f"```json\n{call}\n```" if fenced else call
    how, settled = decided(smollm_tokenizer, grammars, request, text)
    assert how == ("fence" if fenced else "brace") and settled == "call"
    assert accepts_ids(grammars, request.trigger()["calls"], encode(smollm_tokenizer, text))


@pytest.mark.parametrize("parser_class", [HermesToolParser, Llama3JsonToolParser])
def test_text_after_a_whole_fenced_call_does_not_let_it_go(smollm_tokenizer, grammars, parser_class):
    """A fenced JSON answer may go on after its fence, so the union grammar takes text there; a
    fenced call may not: once the call is whole the trigger settles on it (the engine then holds
    the reply to the calls alone, which end the turn there)."""
    request, call = calls_for(parser_class)
    fenced, after = f"```json\n{call}\n```", "\nDone."
    ids = encode(smollm_tokenizer, fenced + after)
    assert grammars.matcher(request.trigger()["grammar"]).validate_tokens(ids) == len(ids)
    calls = grammars.matcher(request.trigger()["calls"])
    assert calls.validate_tokens(ids) < len(ids)
    assert decided(smollm_tokenizer, grammars, request, fenced + after) == ("fence", "call")


@pytest.mark.parametrize("parser_class", [HermesToolParser, Llama3JsonToolParser])
def test_the_almost_calls_are_still_masked_into_json(smollm_tokenizer, grammars, parser_class):
    """A second `{` or an unquoted key fits neither a call nor JSON: masked while the reply decides."""
    request, _ = calls_for(parser_class)
    matcher = grammars.matcher(request.trigger()["grammar"])
    brace = encode(smollm_tokenizer, "{")
    assert matcher.consume_tokens(brace)
    for bad in ("{", "name"):
        assert matcher.validate_tokens(encode(smollm_tokenizer, bad)) == 0


# -- resumed after an engine died (engine/resume.py) ------------------------------------------


def weather_prompt(engine: LLMEngine) -> list[int]:
    request = tools(engine.tokenizer)
    return engine.tokenize(render(engine.tokenizer, ASK, tools=request.tools, tool_parser=request.parser))


def written(engine: LLMEngine, rid: str, params: SamplingParams, resume=None) -> list[int]:
    engine.add_request(rid, weather_prompt(engine), params, resume=resume)
    return [t for out in run_to_completion(engine)[rid] for t in out.token_ids]


RESUMED = {
    # seeded, its first token pushed to `{{` and drawn again under the grammar
    "redrawn opening": dict(temperature=0.9, seed=5, logit_bias={"{{": 10.0}),
    # seeded prose: the trigger still watching when the engine dies
    "armed trigger": dict(temperature=0.8, seed=9, logit_bias={"The": 5.0}),
    # a reasoning block its budget ends, then an answer pushed to open with `{{`
    "after reasoning": dict(
        temperature=0.9,
        seed=13,
        logit_bias={"{{": 10.0},
        reasoning={"start": "<think>", "end": "</think>", "opened": True, "budget": 6},
    ),
}


@pytest.mark.parametrize("case", RESUMED.values(), ids=RESUMED.keys())
def test_a_watched_seeded_reply_resumes_token_for_token(smollm_engine, case):
    """A reply resumed from the tokens delivered before its engine died writes the rest as the
    uninterrupted one did: a redrawn opening token took the one draw a token takes (the redraw
    reuses its noise), so the resumed generator skips exactly the draws the first run made, and
    the trigger, grammar and reasoning are replayed to where they were."""
    tokenizer = smollm_engine.tokenizer
    bias = {encode(tokenizer, text)[0]: value for text, value in case.get("logit_bias", {}).items()}
    params = SamplingParams(max_tokens=40, tool_trigger=tools(tokenizer).trigger(), **{**case, "logit_bias": bias})
    whole = written(smollm_engine, "whole", params)
    if "{{" in case.get("logit_bias", {}):  # the answer's first token was drawn again: `{`, never `{{`
        answer = tokenizer.decode(whole).split("</think>")[-1].lstrip()
        assert answer.startswith("{") and not answer.startswith("{{"), tokenizer.decode(whole)
    for delivered in (1, 4, 12):
        rest = written(smollm_engine, f"resumed-{delivered}", params, resume=[whole[:delivered]])
        assert rest == whole[delivered:], (delivered, tokenizer.decode(whole))


@pytest.mark.parametrize("parser_class", [HermesToolParser, Llama3JsonToolParser])
def test_a_guess_while_deciding_stops_before_the_token_that_makes_the_call_whole(smollm_tokenizer, grammars, parser_class):
    """Guesses go on while a `{` decides, as far as a call takes them, but the token that makes the
    call whole is the model's own draw: after it the calls alone hold the reply."""
    request, call = calls_for(parser_class)
    spec = request.trigger()
    trigger = ToolTrigger(spec, lambda t: smollm_tokenizer.decode([t]), lambda s: encode(smollm_tokenizer, s))
    ids = encode(smollm_tokenizer, call)
    opening = trigger.observe(ids[:1])
    calls = grammars.matcher(spec["calls"])
    assert opening is not None and all(calls.consume_token(t) for t in opening)
    trigger.opened("brace", calls)
    draft = ids[1:] + encode(smollm_tokenizer, "\n\nDone.")
    assert trigger.speculable(draft) == len(ids) - 2  # all but the closing brace
    assert trigger.speculable(draft[:3]) == 3 and trigger.observe(ids) is None and trigger.settled == "call"
