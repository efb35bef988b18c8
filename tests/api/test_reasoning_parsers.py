"""Reasoning parsers: which prompts leave the reply in reasoning, and the split of a reply into
reasoning and answer, whole and streamed in any pieces (markers cut across deltas). Gemma 4's
thought channel included; its official template's prompts are in test_tools_gemma4.py."""

from __future__ import annotations

import pytest

from inference.api.common.reasoning_parsers import (
    PARSERS,
    DeepSeekR1ReasoningParser,
    Gemma4ReasoningParser,
    Qwen3ReasoningParser,
    parser_for_template,
    reasoning_parser_for,
)

OPENED = "<|im_start|>assistant\n<think>\n"
PLAIN = "<|im_start|>assistant\n"
CLOSED = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
GEMMA_THINKING = "<|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
GEMMA_OFF = "<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"


def streamed(reader, text: str, size: int) -> tuple[str, str]:
    splitter = reader.splitter()
    reasoning, answer = "", ""
    for start in range(0, len(text), size):
        r, a = splitter.add(text[start : start + size])
        reasoning, answer = reasoning + r, answer + a
    r, a = splitter.finish()
    return reasoning + r, answer + a


@pytest.mark.parametrize(
    "parser, prompt, reply, expected",
    [
        (Qwen3ReasoningParser(), OPENED, "\nweighing it up\n</think>\n\nThe answer.", ("weighing it up\n", "The answer.")),
        (Qwen3ReasoningParser(), PLAIN, "<think>\nhmm</think>Yes.", ("hmm", "Yes.")),
        (Qwen3ReasoningParser(), PLAIN, "Just an answer.", (None, "Just an answer.")),
        (Qwen3ReasoningParser(), OPENED, "cut short while thinking", ("cut short while thinking", "")),
        (DeepSeekR1ReasoningParser(), PLAIN, "thinking without a tag</think>Done.", ("thinking without a tag", "Done.")),
        (DeepSeekR1ReasoningParser(), OPENED, "<think>again</think>ok", ("again", "ok")),
        (Gemma4ReasoningParser(), GEMMA_THINKING, "<|channel>thought\nWeighing.<channel|>Hello!", ("Weighing.", "Hello!")),
        (Gemma4ReasoningParser(), GEMMA_THINKING, "Hello!", (None, "Hello!")),
        (Gemma4ReasoningParser(), GEMMA_THINKING, "<|channel>thought\ncut short", ("cut short", "")),
    ],
)
@pytest.mark.parametrize("size", [1, 2, 3, 1000])
def test_a_reply_splits_the_same_whole_and_streamed_in_any_pieces(parser, prompt, reply, expected, size):
    reader = parser.for_prompt(prompt)
    assert reader.split(reply) == expected
    reasoning, answer = streamed(reader, reply, size)
    assert (reasoning if expected[0] is not None else None, answer) == expected


def test_a_prompt_that_closes_the_block_has_no_reasoning():
    assert Qwen3ReasoningParser().for_prompt(CLOSED) is None
    reader = Qwen3ReasoningParser().for_prompt(OPENED)
    assert reader.in_reasoning and reader.expected
    plain = Qwen3ReasoningParser().for_prompt(PLAIN)
    assert not plain.in_reasoning and plain.may_open and plain.expected


def test_gemma4_thinks_where_the_prompt_says_so_whatever_earlier_channels_show():
    parser = Gemma4ReasoningParser()
    assert parser.for_prompt(GEMMA_OFF) is None
    reader = parser.for_prompt(GEMMA_THINKING)
    assert not reader.in_reasoning and reader.may_open and (reader.start, reader.end) == ("<|channel>thought", "<channel|>")
    earlier = (
        GEMMA_THINKING + "<|channel>thought\nplan<channel|><|tool_call>call:f{}<tool_call|><|tool_response>x<tool_response|>"
    )
    assert parser.for_prompt(earlier).may_open  # a closed channel of an earlier step: thinking is still on
    assert parser.for_prompt(GEMMA_THINKING + "<|channel>thought\n").in_reasoning  # a channel the prompt opened


def test_the_parser_comes_from_the_template_or_the_setting(settings):
    assert parser_for_template("{{ '<think>' }} enable_thinking").name == "qwen3"
    assert parser_for_template("<｜Assistant｜><think>").name == "deepseek_r1"
    assert parser_for_template("<|im_start|>{{ m.content }}") is None
    assert parser_for_template("{{- '<|turn>model\\n<|channel>thought\\n<channel|>' -}}").name == "gemma4"
    assert set(settings.REASONING_PARSERS) == set(PARSERS)

    class Tokenizer:
        chat_template = "<think>"

    settings.MINIVLLM_REASONING_PARSER = "none"
    assert reasoning_parser_for(Tokenizer()) is None
    settings.MINIVLLM_REASONING_PARSER = "deepseek_r1"
    assert reasoning_parser_for(Tokenizer()).name == "deepseek_r1"
