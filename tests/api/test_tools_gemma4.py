"""Gemma 4's chat template as published (tests/support/chat_templates/google-gemma-4-31B-it.jinja),
rendered by transformers' own apply_chat_template on the SmolLM2 tokenizer: the template writes
calls in its own notation (`<|tool_call>call:NAME{...}<tool_call|>`), files each tool result under
its call (a `tool` message that follows no call is dropped), and thinking is on only where
`enable_thinking` is true (`<|think|>` in the system turn; the reply's reasoning is a thought
channel, `<|channel>thought ... <channel|>`).

- The served model's tool parser and reasoning parser (gemma4, both) come from the template.
- A chat request's prompt, rendered the way the API renders it, is byte for byte the prompt
  transformers renders for the same messages, tools and thinking switch, an earlier turn's calls
  and their results included.
- The template's own rendering of an assistant's calls reads back to the same calls; the call
  grammar takes that text and refuses a call to a function the request did not offer; under
  tool_choice auto the trigger opens at the template's tag and the rest of its call fits.
"""

from __future__ import annotations

import pytest

from inference.api.common.reasoning_parsers import Gemma4ReasoningParser, plan_reasoning, reasoning_parser_for
from inference.api.common.tool_calls import ToolRequest
from inference.api.common.tool_parsers import Gemma4ToolParser, tool_parser_for
from tests.support.grammar_checks import accepts, accepts_ids, encode, grammars_for, replay_trigger
from tests.support.official_templates import GEMMA4, tokenizer_with
from tests.support.tool_conversation import ASK, CALLED, CALLS, FUNCTIONS, THINKING, TOOLS, chat_prompt, transformers_messages


@pytest.fixture(scope="module")
def gemma4(smollm_tokenizer):
    return tokenizer_with(smollm_tokenizer, GEMMA4)


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return grammars_for(smollm_tokenizer)


def test_the_template_chooses_its_notation_and_its_thought_channel(gemma4):
    assert isinstance(tool_parser_for(gemma4), Gemma4ToolParser)
    assert isinstance(reasoning_parser_for(gemma4), Gemma4ReasoningParser)


@pytest.mark.parametrize("messages", [ASK, CALLED], ids=["first turn", "after calls and results"])
@pytest.mark.parametrize("body, kwargs", THINKING.values(), ids=THINKING.keys())
def test_our_prompt_is_the_one_transformers_renders(gemma4, messages, body, kwargs):
    ours, _ = chat_prompt(gemma4, {"messages": messages, **body})
    theirs = gemma4.apply_chat_template(
        transformers_messages(messages), tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )
    assert ours == theirs
    if messages is CALLED:  # each result under its own call's name
        assert '<|tool_response>response:get_weather{value:<|"|>18 C, sunny<|"|>}<tool_response|>' in ours
        assert '<|tool_response>response:search{value:<|"|>Nothing new.<|"|>}<tool_response|>' in ours


@pytest.mark.parametrize("messages", [ASK, CALLED], ids=["first turn", "after calls and results"])
def test_thinking_on_lets_the_reply_open_its_thought_channel(gemma4, messages):
    prompt, inp = chat_prompt(gemma4, {"messages": messages, "chat_template_kwargs": {"enable_thinking": True}})
    assert "<|think|>" in prompt
    plan_reasoning(inp, gemma4, prompt)
    assert inp.params.reasoning == {"end": "<channel|>", "start": "<|channel>thought", "opened": False, "budget": None}
    reply = "<|channel>thought\nTwo questions.<channel|>" + Gemma4ToolParser().calls_text(CALLS)
    reasoning, answer = inp.reasoning.split(reply)
    assert reasoning == "Two questions." and Gemma4ToolParser().parse(answer, FUNCTIONS) == (None, CALLS)
    assert inp.reasoning.split("Sunny.") == (None, "Sunny.")  # a reply that does not think is all answer


def test_thinking_off_closes_the_channel_and_the_reply_is_all_answer(gemma4):
    prompt, inp = chat_prompt(gemma4, {"messages": ASK})
    assert prompt.endswith("<|turn>model\n<|channel>thought\n<channel|>")
    plan_reasoning(inp, gemma4, prompt)
    assert inp.reasoning is None and inp.params.reasoning is None


def templates_turn(tokenizer) -> str:
    """The model turn with calls, as the template itself writes it (calls, content, the response mark)."""
    text = tokenizer.apply_chat_template(transformers_messages(CALLED[:3]), tools=TOOLS, tokenize=False)
    return text.rsplit("<|turn>model\n", 1)[1]


def test_the_templates_own_calls_read_back(gemma4):
    turn = templates_turn(gemma4)
    assert turn == Gemma4ToolParser().calls_text(CALLS) + "Let me check.<|tool_response>"  # our writing is the template's
    assert Gemma4ToolParser().parse(turn, FUNCTIONS) == ("Let me check.", CALLS)


def test_the_grammar_takes_the_templates_calls_and_refuses_others(gemma4, grammars, smollm_tokenizer):
    calls = templates_turn(gemma4).removesuffix("Let me check.<|tool_response>")
    parser = Gemma4ToolParser().bind(smollm_tokenizer)
    required = ToolRequest(TOOLS, "required", True, parser).grammar()
    assert accepts(grammars, smollm_tokenizer, required, calls)
    assert not accepts(grammars, smollm_tokenizer, required, calls.replace("call:search", "call:delete_files"))
    assert not accepts(grammars, smollm_tokenizer, required, calls.replace("days:", "weeks:"))
    named = ToolRequest(TOOLS, {"type": "function", "function": {"name": "get_weather"}}, True, parser).grammar()
    first = calls[: calls.index("<tool_call|>") + len("<tool_call|>")]
    assert accepts(grammars, smollm_tokenizer, named, first) and not accepts(grammars, smollm_tokenizer, named, calls)


def test_the_trigger_opens_at_the_tag_and_the_templates_call_fits_from_there(gemma4, grammars, smollm_tokenizer):
    calls = templates_turn(gemma4).removesuffix("Let me check.<|tool_response>")
    spec = ToolRequest(TOOLS, "auto", True, Gemma4ToolParser().bind(smollm_tokenizer)).trigger()
    assert spec["tags"] == ["<|tool_call>"] and not spec["bare"]
    text = "Checking. " + calls
    written, opening, _ = replay_trigger(smollm_tokenizer, spec, text)
    assert written == "Checking. <|tool_call>"
    assert accepts_ids(grammars, spec["grammar"], opening + encode(smollm_tokenizer, text[len(written) :]))
