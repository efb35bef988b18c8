"""Reasoning parsers: a thinking model's reply split into its reasoning and its answer.

Qwen3 and DeepSeek-R1 write their reasoning between `<think>` and `</think>`, then the answer. A
template may open the block in the prompt (DeepSeek-R1's does, and Qwen3's newer thinking
models'), so the reply starts inside it; one may also close an empty block there (Qwen3's
`enable_thinking: false`), so the reply has none. How a reply reads is therefore decided per
request from the rendered prompt (`ReasoningParser.for_prompt`). The two families differ in one
point: a DeepSeek-R1 reply is reasoning from its first token even when neither the prompt nor
the reply opens the block; a Qwen3 reply without `<think>` (and no open block) is all answer.

Gemma 4 writes its reasoning in a thought channel, `<|channel>thought` ... `<channel|>`, and its
template says whether thinking is on by `<|think|>` at the top of the system turn (off, it closes an
empty channel after the generation prompt): a Gemma 4 reply may open the channel exactly when the
prompt holds `<|think|>`, whatever closed channels earlier turns show.

The parser is chosen from the chat template or named with MINIVLLM_REASONING_PARSER (vLLM's
`--reasoning-parser` names; `none` turns splitting off). The engine hears of it through
`SamplingParams.reasoning` (engine/sample/reasoning.py): grammars start after the end marker, and a
thinking budget, once spent, forces it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from django.conf import settings

START, END = "<think>", "</think>"


class ReasoningSplitter:
    """One reply's text, fed as it streams: each `add` says which part of the delta is reasoning
    and which is answer, holding back what may be the start of a marker. `finish` flushes."""

    def __init__(self, in_reasoning: bool, may_open: bool, start: str = START, end: str = END):
        self.start, self.end = start, end
        self.phase = "reasoning" if in_reasoning else ("opening" if may_open else "answer")
        self.reasoned = in_reasoning  # the reply has (had) a reasoning block
        self.buffer = ""
        self.at_start = {"reasoning": True, "answer": True}  # leading newlines are dropped

    def _emit(self, phase: str, text: str) -> str:
        if self.at_start[phase]:
            text = text.lstrip("\n") if phase == "reasoning" else text.lstrip()
            self.at_start[phase] = not text
        return text

    def add(self, delta: str) -> tuple[str, str]:
        reasoning, answer = "", ""
        self.buffer += delta
        while self.buffer:
            if self.phase == "opening":  # the reply may open the block itself
                head = self.buffer.lstrip()
                if head.startswith(self.start):
                    self.phase, self.buffer, self.reasoned = "reasoning", head[len(self.start) :], True
                    continue
                if self.start.startswith(head):
                    break  # perhaps the marker's start: wait
                self.phase = "answer"
            elif self.phase == "reasoning":
                if self.at_start["reasoning"] and self.buffer.lstrip().startswith(self.start):
                    self.buffer = self.buffer.lstrip()[len(self.start) :]  # a block the prompt opened, written again
                    continue
                found = self.buffer.find(self.end)
                if found >= 0:
                    reasoning += self._emit("reasoning", self.buffer[:found])
                    self.phase, self.buffer = "answer", self.buffer[found + len(self.end) :]
                    continue
                keep = _held(self.buffer, self.end)
                if self.at_start["reasoning"] and self.start.startswith(self.buffer.lstrip()):
                    keep = len(self.buffer)
                reasoning += self._emit("reasoning", self.buffer[: len(self.buffer) - keep])
                self.buffer = self.buffer[len(self.buffer) - keep :]
                break
            else:
                answer += self._emit("answer", self.buffer)
                self.buffer = ""
        return reasoning, answer

    def finish(self) -> tuple[str, str]:
        """What was held at the end: reasoning cut short stays reasoning; anything else is answer."""
        rest, self.buffer = self.buffer, ""
        if self.phase == "reasoning":
            return self._emit("reasoning", rest), ""
        return "", self._emit("answer", rest)


@dataclasses.dataclass(frozen=True)
class ReplyReasoning:
    """How the replies to one prompt read (the request path's ReasoningReader)."""

    in_reasoning: bool  # the reply starts inside the block
    may_open: bool  # the reply may open the block itself
    start: str = START  # the family's markers
    end: str = END

    @property
    def expected(self) -> bool:
        """Whether the reply reasons first (grammars and budgets wait for the end marker)."""
        return self.in_reasoning or self.may_open

    def splitter(self) -> ReasoningSplitter:
        return ReasoningSplitter(self.in_reasoning, self.may_open, self.start, self.end)

    def split(self, text: str) -> tuple[str | None, str]:
        """(the reasoning, or None when the reply has none, the answer) of a whole reply."""
        splitter = self.splitter()
        reasoning, answer = splitter.add(text)
        more_reasoning, more_answer = splitter.finish()
        return (reasoning + more_reasoning if splitter.reasoned else None), answer + more_answer


class ReasoningParser:
    name: ClassVar[str]
    always_reasons: ClassVar[bool] = False  # a reply is reasoning from its first token
    start: ClassVar[str] = START  # what opens the reasoning block, and what closes it
    end: ClassVar[str] = END

    def for_prompt(self, prompt: str) -> ReplyReasoning | None:
        """How a reply to `prompt` reads; None when the prompt closed the block (thinking is off)."""
        opened, closed = prompt.rfind(self.start), prompt.rfind(self.end)
        if closed >= 0 and closed > opened:
            return None  # the template closed the block (thinking off; templates drop earlier turns' reasoning)
        in_reasoning = opened > closed or self.always_reasons
        return self.reader(in_reasoning, may_open=not in_reasoning)

    def reader(self, in_reasoning: bool, *, may_open: bool) -> ReplyReasoning:
        return ReplyReasoning(in_reasoning=in_reasoning, may_open=may_open, start=self.start, end=self.end)


class Qwen3ReasoningParser(ReasoningParser):
    name = "qwen3"


class DeepSeekR1ReasoningParser(ReasoningParser):
    name = "deepseek_r1"
    always_reasons = True


class Gemma4ReasoningParser(ReasoningParser):
    """Gemma 4's thought channel; thinking is on where the prompt holds `<|think|>` (module docstring)."""

    name = "gemma4"
    CHANNEL, THINKING = "<|channel>", "<|think|>"
    start, end = CHANNEL + "thought", "<channel|>"

    def for_prompt(self, prompt: str) -> ReplyReasoning | None:
        if self.THINKING not in prompt:
            return None  # thinking off: the template closed an empty channel, the reply answers
        in_reasoning = prompt.rfind(self.start) > prompt.rfind(self.end)
        return self.reader(in_reasoning, may_open=not in_reasoning)


PARSERS = {parser.name: parser for parser in (Qwen3ReasoningParser, DeepSeekR1ReasoningParser, Gemma4ReasoningParser)}
DEEPSEEK_MARKERS = ("<｜Assistant｜>", "<|Assistant|>")


def parser_for_template(template: str | None) -> ReasoningParser | None:
    text = str(template or "")
    if Gemma4ReasoningParser.CHANNEL in text:
        return Gemma4ReasoningParser()
    if START not in text:
        return None
    return DeepSeekR1ReasoningParser() if any(m in text for m in DEEPSEEK_MARKERS) else Qwen3ReasoningParser()


def reasoning_parser_for(tokenizer) -> ReasoningParser | None:
    """The served model's parser: MINIVLLM_REASONING_PARSER when it names one (`none`: off), else its template's."""
    named = settings.MINIVLLM_REASONING_PARSER
    if named == "none":
        return None
    if named != "auto":
        return PARSERS[named]()
    return parser_for_template(getattr(tokenizer, "chat_template", None) if tokenizer is not None else None)


def _held(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the start of `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def plan_reasoning(inp, tokenizer, prompt: str) -> None:
    """Tells the request (`inp`, a GenerationInput) how its replies read once its prompt is
    rendered: the reader that splits them, and the engine's `reasoning` parameter (the end marker,
    the thinking budget) when they start in reasoning."""
    parser = reasoning_parser_for(tokenizer)
    reader = parser.for_prompt(prompt) if parser is not None else None
    inp.reasoning = reader
    if reader is not None and reader.expected:
        reasoning = {"end": reader.end, "start": reader.start, "opened": reader.in_reasoning, "budget": inp.thinking_budget}
        inp.params = dataclasses.replace(inp.params, reasoning=reasoning)


def split_delta(splitter: ReasoningSplitter | None, text: str, ended: bool) -> tuple[str, str]:
    """A streamed delta's (reasoning, answer), the splitter flushed when its choice ended; without
    a splitter (no reasoning parser) it is all answer."""
    if splitter is None:
        return "", text
    reasoning, answer = splitter.add(text) if text else ("", "")
    if ended:
        more_reasoning, more_answer = splitter.finish()
        reasoning, answer = reasoning + more_reasoning, answer + more_answer
    return reasoning, answer
