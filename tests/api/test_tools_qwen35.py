"""Qwen3.5's chat template as published (tests/support/chat_templates/Qwen3.5-4B.jinja), rendered by
transformers' own apply_chat_template on the SmolLM2 tokenizer: the template writes tool calls in
Qwen3-Coder's XML form, and thinking is on unless `enable_thinking` is false.

- The served model's tool parser (qwen3_coder) and reasoning parser (qwen3) come from the template.
- A chat request's prompt, rendered the way the API renders it (parse_chat, render_request), is
  byte for byte the prompt transformers renders for the same messages, tools and thinking switch,
  an earlier turn's calls and their results included.
- The template's own rendering of an assistant's calls reads back to the same calls, each value
  the type its schema gives it; the call grammar takes that text, and refuses a call to a function
  the request did not offer or a parameter the function does not have; under tool_choice auto the
  trigger opens at the template's tag and the rest of its call fits the grammar.
"""

from __future__ import annotations

import pytest

from inference.api.common.reasoning_parsers import Qwen3ReasoningParser, plan_reasoning, reasoning_parser_for
from inference.api.common.tool_calls import ToolRequest
from inference.api.common.tool_parsers import Qwen3CoderToolParser, tool_parser_for
from tests.support.grammar_checks import accepts, accepts_ids, encode, grammars_for, replay_trigger
from tests.support.official_templates import QWEN35, tokenizer_with
from tests.support.tool_conversation import ASK, CALLED, CALLS, FUNCTIONS, THINKING, TOOLS, chat_prompt, transformers_messages


@pytest.fixture(scope="module")
def qwen35(smollm_tokenizer):
    return tokenizer_with(smollm_tokenizer, QWEN35)


@pytest.fixture(scope="module")
def grammars(smollm_tokenizer):
    return grammars_for(smollm_tokenizer)


def test_the_template_chooses_xml_calls_and_the_think_block(qwen35):
    assert isinstance(tool_parser_for(qwen35), Qwen3CoderToolParser)
    assert isinstance(reasoning_parser_for(qwen35), Qwen3ReasoningParser)


@pytest.mark.parametrize("messages", [ASK, CALLED], ids=["first turn", "after calls and results"])
@pytest.mark.parametrize("body, kwargs", THINKING.values(), ids=THINKING.keys())
def test_our_prompt_is_the_one_transformers_renders(qwen35, messages, body, kwargs):
    ours, _ = chat_prompt(qwen35, {"messages": messages, **body})
    theirs = qwen35.apply_chat_template(
        transformers_messages(messages), tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )
    assert ours == theirs
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in ours or messages is ASK


def test_the_thinking_switch_decides_how_the_reply_reads(qwen35):
    prompt, inp = chat_prompt(qwen35, {"messages": ASK})
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    plan_reasoning(inp, qwen35, prompt)
    assert inp.params.reasoning == {"end": "</think>", "start": "<think>", "opened": True, "budget": None}
    reply = "Two questions: weather, news.\n</think>\n\n" + Qwen3CoderToolParser().calls_text(CALLS)
    reasoning, answer = inp.reasoning.split(reply)
    assert reasoning == "Two questions: weather, news.\n"
    assert Qwen3CoderToolParser().parse(answer, FUNCTIONS) == (None, CALLS)
    prompt, inp = chat_prompt(qwen35, {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False}})
    assert prompt.endswith("<think>\n\n</think>\n\n")
    plan_reasoning(inp, qwen35, prompt)
    assert inp.reasoning is None and inp.params.reasoning is None  # the template closed the block: all answer


def templates_turn(tokenizer) -> str:
    """The assistant turn with calls, as the template itself writes it."""
    text = tokenizer.apply_chat_template(transformers_messages(CALLED[:3]), tools=TOOLS, tokenize=False)
    turn = text.rsplit("<|im_start|>assistant\n", 1)[1]
    return turn.removeprefix("<think>\n\n</think>\n\n").removesuffix("<|im_end|>\n")


def test_the_templates_own_calls_read_back_typed(qwen35):
    turn = templates_turn(qwen35)
    assert turn == "Let me check.\n\n" + Qwen3CoderToolParser().calls_text(CALLS)  # our writing is the template's
    assert "<parameter=exact>\nTrue\n</parameter>" in turn  # a boolean as the template writes it
    assert Qwen3CoderToolParser().parse(turn, FUNCTIONS) == ("Let me check.", CALLS)


def test_the_grammar_takes_the_templates_calls_and_refuses_others(qwen35, grammars, smollm_tokenizer):
    calls = templates_turn(qwen35).removeprefix("Let me check.\n\n")
    parser = Qwen3CoderToolParser().bind(smollm_tokenizer)
    required = ToolRequest(TOOLS, "required", True, parser).grammar()
    assert accepts(grammars, smollm_tokenizer, required, calls)
    assert not accepts(grammars, smollm_tokenizer, required, calls.replace("<function=search>", "<function=delete_files>"))
    assert not accepts(grammars, smollm_tokenizer, required, calls.replace("<parameter=days>", "<parameter=weeks>"))
    named = ToolRequest(TOOLS, {"type": "function", "function": {"name": "search"}}, True, parser).grammar()
    second = calls[calls.index("\n<tool_call>") + 1 :]
    assert accepts(grammars, smollm_tokenizer, named, second)
    assert not accepts(grammars, smollm_tokenizer, named, calls)  # the named function's call, and only one


def test_the_trigger_opens_at_the_tag_and_the_templates_call_fits_from_there(qwen35, grammars, smollm_tokenizer):
    turn = templates_turn(qwen35)
    spec = ToolRequest(TOOLS, "auto", True, Qwen3CoderToolParser().bind(smollm_tokenizer)).trigger()
    assert spec["tags"] == ["<tool_call>", "<function="] and not spec["bare"]
    written, opening, _ = replay_trigger(smollm_tokenizer, spec, turn)
    assert written == "Let me check.\n\n<tool_call>"
    rest = encode(smollm_tokenizer, turn[len(written) :])
    assert accepts_ids(grammars, spec["grammar"], opening + rest)
    assert replay_trigger(smollm_tokenizer, spec, "It is sunny; call me when <you> like.")[0] is None
