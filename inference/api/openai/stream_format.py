"""Jobs' outputs rendered per API: the seed's /generate events and OpenAI's bodies and chunks.

Each generator ends in `finally: await job.close()`, so a client that goes away mid-stream
(CancelledError at an await, or GeneratorExit at a yield) aborts its engine request and gets an
`aborted` row. The CancelledError is never swallowed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from ...engine.outputs import TokenLogprob
from ...serving.jobs import Choice, GenerationJob
from ..common import sse
from ..common.reasoning_parsers import ReplyReasoning, split_delta
from ..common.tool_calls import ToolRequest
from ..common.tool_parsers import ToolParser
from . import format as oai


def _generate_logprobs(items: list[TokenLogprob]) -> list[dict]:
    return [
        {
            "token": item.token,
            "logprob": item.logprob,
            "top": [{"token": text, "logprob": lp} for _, text, lp in item.top],
        }
        for item in items
    ]


async def generate_events(job: GenerationJob):
    """The seed's format: start, one token event per piece, then done (or error)."""
    try:
        yield sse.event({"type": "start", "request_id": job.request_id})
        async for out in job:
            if out.text or out.logprobs:
                token = {"type": "token", "text": out.text}
                if out.logprobs:
                    token["logprobs"] = _generate_logprobs(out.logprobs)
                yield sse.event(token)
        await job.wait_recorded()  # the row is final before the client sees the last event
        if job.finish_reason == "error":
            yield sse.event({"type": "error", "message": job.error or "generation failed"})
        else:
            yield sse.event(
                {
                    "type": "done",
                    "finish_reason": job.finish_reason,
                    "usage": oai.usage(
                        job.prompt_tokens,
                        job.completion_tokens,
                        speculation=(job.speculation("spec_draft_tokens"), job.speculation("spec_accepted_tokens")),
                    ),
                }
            )
    finally:
        await job.close()


@dataclasses.dataclass
class OpenAIResponse:
    """One OpenAI request's jobs, one per prompt (a list of prompts on /v1/completions), each with
    n choices: the choice of completion i of prompt p is index p * n + i, as vLLM numbers them.
    `echo`: each choice's text starts with its prompt (and its logprobs with the prompt's)."""

    request_id: str
    model: str
    jobs: list[GenerationJob]
    kind: str = "chat"  # or "completion"
    include_usage: bool = False  # a stream's last chunk carries the usage
    continuous_usage: bool = False  # and every chunk the counts so far (a client times tokens, not chunks)
    tokenizer: object = None
    echo: bool = False
    echo_only: bool = False  # max_tokens 0: the prompt alone; the one token generated is dropped
    prompt_texts: list[str] = dataclasses.field(default_factory=list)
    show_prompt_logprobs: bool = False  # asked for by name (echo with logprobs computes them too)
    tools: ToolRequest | None = None  # chat with tools: each choice's calls are read out of its text
    reasoning: ReplyReasoning | None = None  # a thinking model's replies: reasoning split off the answer
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))

    @property
    def n(self) -> int:
        return self.jobs[0].params.n

    def index(self, position: int, choice: Choice) -> int:
        return position * self.n + choice.index

    @property
    def wants_logprobs(self) -> bool:
        return self.jobs[0].params.logprobs is not None

    def usage(self) -> dict:
        return oai.usage(
            sum(job.prompt_tokens for job in self.jobs),
            0 if self.echo_only else sum(job.completion_tokens for job in self.jobs),
            sum(job.cached_tokens for job in self.jobs),
            sum(job.reasoning_tokens for job in self.jobs) if self.reasoning is not None else None,
            self._prediction_counts() if self.jobs[0].params.prediction else None,
            (
                sum(job.speculation("spec_draft_tokens") for job in self.jobs),
                sum(job.speculation("spec_accepted_tokens") for job in self.jobs),
            ),
        )

    def _prediction_counts(self) -> tuple[int, int]:
        """(the prediction's tokens, offered to every choice; those taken into the replies as guesses)."""
        offered = sum(len(job.params.prediction) * len(job.choices) for job in self.jobs)
        return offered, sum(job.speculation("prediction_accepted_tokens") for job in self.jobs)

    def failed(self) -> GenerationJob | None:
        return next((job for job in self.jobs if job.finish_reason == "error"), None)

    def echo_logprobs(self, position: int) -> list | None:
        """The prompt's tokens as (text, TokenLogprob or None) pairs, for echo with logprobs."""
        job = self.jobs[position]
        if not (self.echo and self.wants_logprobs) or job.prompt_logprobs is None:
            return None
        first = job.prompt_token_ids[0]
        pairs = [(self.tokenizer.decode([first]), None)]
        return pairs + [(item.token, item) for item in job.prompt_logprobs[1:]]

    def _ids(self) -> dict:
        return {"request_id": self.request_id, "created": self.created, "model": self.model}

    def body(self) -> dict:
        return self.chat_body() if self.kind == "chat" else self.completion_body()

    async def finish(self) -> dict:
        return self.body()

    def stream(self):
        chunks = self.chat_chunks if self.kind == "chat" else self.completion_chunks
        return chunks(self.include_usage)

    # ---- whole responses ------------------------------------------------------------------------

    def completion_body(self) -> dict:
        choices = []
        for position, job in enumerate(self.jobs):
            prefix = self.prompt_texts[position] if self.echo else ""
            for choice in job.choices:
                generated, generated_logprobs = ("", []) if self.echo_only else (choice.text, choice.logprobs)
                logprobs = None
                if self.wants_logprobs:
                    logprobs = oai.completion_logprobs(generated_logprobs, prompt=self.echo_logprobs(position))
                body = oai.completion_choice(
                    index=self.index(position, choice),
                    text=prefix + generated,
                    logprobs=logprobs,
                    finish_reason="length" if self.echo_only else choice.finish_reason,
                    stop_reason=None if self.echo_only else choice.stop_reason,
                )
                if self.show_prompt_logprobs:
                    body["prompt_logprobs"] = oai.prompt_logprobs(job.prompt_logprobs)
                choices.append(body)
        return oai.completion(**self._ids(), choices=choices, usage=self.usage())

    def chat_body(self) -> dict:
        job = self.jobs[0]
        choices = []
        for choice in job.choices:
            body = oai.chat_choice(
                index=choice.index,
                text=choice.answer,
                logprobs=oai.chat_logprobs(choice.logprobs) if self.wants_logprobs else None,
                finish_reason=choice.finish_reason,
                stop_reason=choice.stop_reason,
                reasoning=choice.reasoning,
            )
            if choice.tool_calls:
                body["message"]["tool_calls"] = [call.body() for call in choice.tool_calls]
            choices.append(body)
        prompt = oai.prompt_logprobs(job.prompt_logprobs) if self.show_prompt_logprobs else None
        return oai.chat_completion(**self._ids(), choices=choices, usage=self.usage(), prompt_logprobs=prompt)

    # ---- streams ------------------------------------------------------------------------------

    def _chunk(self, chunk: dict) -> str:
        """A chunk's event; with continuous usage it carries the counts so far, as vLLM's do."""
        if self.continuous_usage:
            chunk["usage"] = self.usage()
        return sse.event(chunk)

    def _counts_alone(self, out) -> bool:
        """Under continuous usage a token that adds no text (held by the detokenizer, a padding
        token) still gets its chunk, as llama-server streams one: a client counting tokens by the
        usage times each when it came, not with the next visible text."""
        return self.continuous_usage and bool(out.token_ids)

    def _tail(self, object_name: str, include_usage: bool):
        """Error (if any), usage (if asked) and [DONE]; called once every row is final."""
        failed = self.failed()
        if failed is not None:
            yield sse.event(oai.error_body(failed.error or "generation failed"))
        if include_usage:
            yield sse.event(oai.usage_chunk(**self._ids(), object_name=object_name, usage=self.usage()))
        yield sse.DONE

    async def completion_chunks(self, include_usage: bool):
        offsets: dict[int, int] = {}  # each choice's text offset, for its logprobs
        try:
            async for position, job, out, finished in _merged(self.jobs):
                choice = job.choices[out.index] if 0 <= out.index < len(job.choices) else job.choices[0]
                index = self.index(position, choice)
                text, prompt = ("", None) if self.echo_only else (out.text, None)
                out_logprobs = None if self.echo_only else out.logprobs
                if index not in offsets:  # the choice's first chunk: the echoed prompt leads
                    offsets[index] = 0
                    if self.echo:
                        text = self.prompt_texts[position] + text
                        prompt = self.echo_logprobs(position)
                reason = choice.finish_reason if choice in finished and choice.finish_reason != "error" else None
                reason = "length" if reason and self.echo_only else reason
                chunks = []
                if text or out_logprobs or reason or prompt or self._counts_alone(out):
                    logprobs = None
                    if self.wants_logprobs:
                        logprobs = oai.completion_logprobs(out_logprobs or [], offsets[index], prompt=prompt)
                    offsets[index] += len(text)
                    chunks.append(
                        oai.completion_choice(
                            index=index,
                            text=text,
                            logprobs=logprobs,
                            finish_reason=reason,
                            stop_reason=choice.stop_reason if reason else None,
                        )
                    )
                for other in finished:  # choices an abort ended along with this one
                    if other is not choice and other.finish_reason != "error":
                        chunks.append(
                            oai.completion_choice(index=self.index(position, other), text="", finish_reason=other.finish_reason)
                        )
                for body in chunks:
                    yield self._chunk(oai.completion_chunk(**self._ids(), choices=[body]))
            await _wait_recorded(self.jobs)
            for chunk in self._tail("text_completion", include_usage):
                yield chunk
        finally:
            await _close(self.jobs)

    async def chat_chunks(self, include_usage: bool):
        job = self.jobs[0]
        try:
            for choice in job.choices:
                yield self._chunk(oai.chat_chunk(**self._ids(), index=choice.index, delta={"role": "assistant", "content": ""}))
            content = CallHoldback(self.tools.parser) if self.tools is not None else None
            splitters = {}
            async for _, _, out, finished in _merged(self.jobs):
                text, shown = out.text, False
                if self.reasoning is not None:
                    splitter = splitters.setdefault(out.index, self.reasoning.splitter())
                    ended = any(choice.index == out.index for choice in finished)
                    reasoning, text = split_delta(splitter, text, ended)
                    if reasoning:
                        shown = True
                        delta = {"reasoning_content": reasoning, "reasoning": reasoning}
                        yield self._chunk(oai.chat_chunk(**self._ids(), index=out.index, delta=delta))
                if content is not None and text:
                    text = content.add(out.index, text)
                if text or out.logprobs or (not shown and self._counts_alone(out)):
                    logprobs = oai.chat_logprobs(out.logprobs) if self.wants_logprobs else None
                    yield self._chunk(oai.chat_chunk(**self._ids(), index=out.index, delta={"content": text}, logprobs=logprobs))
                for choice in finished:
                    if self.tools is not None and choice.tool_calls:
                        unshown = content.unshown(choice.index, choice.content)
                        if unshown:  # content held with the calls (a candidate that was not the call)
                            yield self._chunk(oai.chat_chunk(**self._ids(), index=choice.index, delta={"content": unshown}))
                        for number, call in enumerate(choice.tool_calls):  # `index` on every chunk: the client's helper needs it
                            yield self._chunk(
                                oai.chat_chunk(**self._ids(), index=choice.index, delta={"tool_calls": [call.body(number)]})
                            )
                    elif content is not None and content.rest(choice.index):  # no call after all: the held text is content
                        yield self._chunk(
                            oai.chat_chunk(**self._ids(), index=choice.index, delta={"content": content.rest(choice.index)})
                        )
                    if choice.finish_reason != "error":
                        yield self._chunk(
                            oai.chat_chunk(
                                **self._ids(),
                                index=choice.index,
                                delta={},
                                finish_reason=choice.finish_reason,
                                stop_reason=choice.stop_reason,
                            )
                        )
            await _wait_recorded(self.jobs)
            for chunk in self._tail("chat.completion.chunk", include_usage):
                yield chunk
        finally:
            await _close(self.jobs)


class CallHoldback:
    """What a streamed chat reply with tools may show as content: the parser decides how much of
    each choice's text so far is surely not a call; the rest is held until the choice ends, then
    sent as tool_calls or, if it held no call, as content."""

    def __init__(self, parser: ToolParser):
        self.parser = parser
        self.text: dict[int, str] = {}  # each choice's reply so far
        self.shown: dict[int, int] = {}  # characters of it sent as content
        self.calling: set[int] = set()  # choices whose reply has reached a call

    def add(self, index: int, delta: str) -> str:
        """The content this delta lets the stream show now."""
        text = self.text[index] = self.text.get(index, "") + delta
        if index in self.calling:
            return ""
        shown = self.shown.get(index, 0)
        safe, calling = self.parser.split(text, shown)
        if calling:
            self.calling.add(index)
        self.shown[index] = max(shown, safe)
        return text[shown:safe]

    def rest(self, index: int) -> str:
        """The held end of a choice's reply (for a choice that ended without calls)."""
        return self.text.get(index, "")[self.shown.get(index, 0) :]

    def unshown(self, index: int, content: str | None) -> str:
        """For a choice that ended with calls: what of its final content (the reply less the calls,
        trimmed) the stream has not shown yet."""
        shown = self.text.get(index, "")[: self.shown.get(index, 0)].strip()
        if not content or not content.startswith(shown):
            return ""
        return content[len(shown) :]


async def _merged(jobs: list[GenerationJob]):
    """(position, job, output, the choices that output finished) from every job, in the order the
    outputs arrive (the finished list is taken as each output is read: a job may read on ahead)."""
    if len(jobs) == 1:
        async for out in jobs[0]:
            yield 0, jobs[0], out, list(jobs[0].newly_finished)
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(position: int, job: GenerationJob) -> None:
        try:
            async for out in job:
                await queue.put((position, job, out, list(job.newly_finished)))
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(position, job)) for position, job in enumerate(jobs)]
    try:
        remaining = len(jobs)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _wait_recorded(jobs: list[GenerationJob]) -> None:
    for job in jobs:
        await job.wait_recorded()


async def _close(jobs: list[GenerationJob]) -> None:
    for job in jobs:
        await job.close()


async def run_to_end(jobs: list[GenerationJob]) -> list[GenerationJob]:
    """Non-streaming: consume every stream (a disconnect still aborts through close())."""
    try:
        async for _ in _merged(jobs):
            pass
    finally:
        await _close(jobs)
    return jobs
