"""One accepted request: its engine stream in, its history row out.

A `GenerationJob` is iterated for `RequestOutput` deltas (of its n choices, by `index`) and
always ends through `close()`:
a stream that stops early (client disconnect -> CancelledError, or GeneratorExit) aborts the
request in the engine and records the row `aborted` with the tokens produced so far. Row writes
are chained tasks on the event loop, so the token stream never waits for the database and the
writes stay in order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref

from .. import services
from ..engine.outputs import RequestOutput, TokenLogprob
from ..engine.sample.sampling_params import SamplingParams
from ..models import GenerationRequest
from .engine_client import EngineClient
from .instruments import RequestMetrics

log = logging.getLogger("inference.serving.jobs")
Status = GenerationRequest.Status

STATUS_BY_FINISH_REASON = {
    "stop": Status.COMPLETED,
    "length": Status.COMPLETED,
    "abort": Status.ABORTED,
    "error": Status.FAILED,
}

_live: set[GenerationJob] = set()

SPECULATION_COUNTS = ("spec_draft_tokens", "spec_accepted_tokens", "prediction_draft_tokens", "prediction_accepted_tokens")


@dataclasses.dataclass
class Choice:
    """One of the request's n completions, as it streams in."""

    index: int
    text_parts: list[str] = dataclasses.field(default_factory=list)
    logprobs: list[TokenLogprob] = dataclasses.field(default_factory=list)
    completion_tokens: int = 0
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    tool_calls: list = dataclasses.field(default_factory=list)  # what the ToolReader read at the end (each has .body())
    content: str | None = None  # the answer less its tool calls, when there are calls or reasoning
    reasoning: str | None = None  # a thinking model's reasoning, split off the answer (ReasoningReader)
    reasoning_tokens: int = 0
    # speculative decoding's counts (RequestOutput's spec_* and prediction_* fields), the latest
    speculation: dict = dataclasses.field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def answer(self) -> str | None:
        """What the reply says: its text less reasoning and tool calls (None: calls and nothing else)."""
        if self.tool_calls or self.content is not None:
            return self.content
        return self.text

    def record(self) -> dict:
        record = {
            "index": self.index,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
            "completion_tokens": self.completion_tokens,
        }
        if self.tool_calls:
            record["tool_calls"] = [call.body() for call in self.tool_calls]
        if self.reasoning is not None:
            record["reasoning"] = self.reasoning
        return record


class GenerationJob:
    def __init__(self, *, engine_client: EngineClient, request_id: str, stream, params: SamplingParams, model: str = ""):
        self.engine_client = engine_client
        self.request_id = request_id
        self.params = params
        self._stream = stream
        self._loop = asyncio.get_running_loop()
        self._submitted_at = time.monotonic()
        self._last_write: asyncio.Task | None = None
        self.choices = [Choice(index) for index in range(params.n)]
        self.newly_finished: list[Choice] = []  # the choices the last output finished
        self.prompt_logprobs: list[TokenLogprob | None] | None = None
        self.prompt_token_ids: list[int] = []
        self.tools = None  # a ToolReader (generation_input.py): each finished choice's text is read for calls
        self.reasoning = None  # a ReasoningReader: each finished choice's reasoning is split off first
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.resumes: list[dict] = []  # where it ran, when an engine died serving it (engine/resume.py)
        self.embedding: list[float] | None = None  # an embedding request's pooled vector
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done = False
        self._last: RequestOutput | None = None
        self.metrics = RequestMetrics(model)

    # ---- start ----------------------------------------------------------------------------

    @classmethod
    def accepted(cls, engine_client: EngineClient, record, stream, params: SamplingParams, token_ids: list[int]) -> GenerationJob:
        """The job of a request the engine has taken (serving/submission.py); its row is queued for writing."""
        job = cls(engine_client=engine_client, request_id=record.request_id, stream=stream, params=params, model=record.model)
        job.prompt_token_ids = token_ids
        job.prompt_tokens = len(token_ids)  # known before the first output (a stream's usage so far)
        job.tools = record.tools
        job.reasoning = record.reasoning
        _live.add(job)
        job._chain(services.request_create, **record.fields(params))
        return job

    # ---- iteration --------------------------------------------------------------------------

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestOutput:
        if self.done:
            raise StopAsyncIteration
        try:
            out = await self._stream.__anext__()
        except StopAsyncIteration:
            self._finish(Status.FAILED, "error", "the engine stopped before the request finished")
            raise
        self._observe(out)
        return out

    @property
    def text(self) -> str:
        """The first choice's text (the only one unless n > 1)."""
        return self.choices[0].text

    @property
    def first_token_time(self) -> float | None:
        """When the first token came (time.monotonic), or None before it."""
        return self._last.first_token_time if self._last is not None else None

    @property
    def completion_tokens(self) -> int:
        return sum(choice.completion_tokens for choice in self.choices)

    @property
    def reasoning_tokens(self) -> int:
        return sum(choice.reasoning_tokens for choice in self.choices)

    def speculation(self, name: str) -> int:
        """A speculative decoding count (SPECULATION_COUNTS) over the request's choices."""
        return sum(choice.speculation.get(name, 0) for choice in self.choices)

    def _observe(self, out: RequestOutput) -> None:
        first = self._last is None
        self._last = out
        self.newly_finished = []
        choice = self.choices[out.index] if 0 <= out.index < len(self.choices) else self.choices[0]
        if out.token_ids:
            self.metrics.on_tokens(time.monotonic(), out.index, len(out.token_ids))
        if out.text:
            choice.text_parts.append(out.text)
        if out.logprobs:
            choice.logprobs.extend(out.logprobs)
        if out.prompt_logprobs is not None:
            self.prompt_logprobs = out.prompt_logprobs
        if out.embedding is not None:
            self.embedding = out.embedding
        self.prompt_tokens = out.prompt_tokens or self.prompt_tokens
        if out.index == 0:  # the prompt's: a child that re-prefilled counts its parent's blocks as cached
            self.cached_tokens = max(self.cached_tokens, out.num_cached_tokens)
        choice.completion_tokens = max(out.completion_tokens, choice.completion_tokens)
        choice.reasoning_tokens = max(out.reasoning_tokens, choice.reasoning_tokens)
        if out.spec_draft_tokens:
            choice.speculation = {name: getattr(out, name) for name in SPECULATION_COUNTS}
        if out.resumes:
            self.resumes = out.resumes
        if out.finish_reason is not None and choice.finish_reason is None and not out.finished:
            self._end_choice(choice, out.finish_reason, out.stop_reason)
        if out.finished:
            reason = out.finish_reason or ("error" if out.error else "stop")
            error = out.error or ("the server is shutting down" if reason == "abort" else "")
            if choice.finish_reason is None:
                self._end_choice(choice, reason, out.stop_reason)
            for other in self.choices:  # an abort or error ends every choice still running
                if other.finish_reason is None:
                    self._end_choice(other, reason, None)
            self._finish(STATUS_BY_FINISH_REASON.get(reason, Status.FAILED), reason, error)
        elif first:
            self._chain(services.request_mark_running, request_id=self.request_id, queue_time=self._queue_time())

    # ---- end ------------------------------------------------------------------------------

    async def close(self) -> None:
        """The end of the response. Idempotent: an unfinished request is aborted in the engine;
        waits for the row writes, then the job leaves the live set (shutdown waits on it)."""
        if not self.done:
            self.abort("client disconnected")
        try:
            await self.wait_recorded()
        finally:
            _live.discard(self)

    def _end_choice(self, choice: Choice, reason: str, stop_reason) -> None:
        choice.finish_reason, choice.stop_reason = reason, stop_reason
        answer = choice.text
        if self.reasoning is not None and reason != "error":
            choice.reasoning, answer = self.reasoning.split(choice.text)
            choice.content = answer
        if self.tools is not None and reason == "stop":
            content, choice.tool_calls = self.tools.read_calls(answer)
            if choice.tool_calls:
                choice.content = content
                choice.finish_reason = "tool_calls"
        self.newly_finished.append(choice)

    def abort(self, reason: str) -> None:
        if self.done:
            return
        self.engine_client.abort(self.request_id)
        for choice in self.choices:  # every choice the client will not see finish
            if choice.finish_reason is None:
                choice.finish_reason = "abort"
        self._finish(Status.ABORTED, "abort", reason)
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            self._loop.create_task(_quietly(aclose()))

    async def wait_recorded(self) -> None:
        task = self._last_write
        if task is not None:
            # shield: a second cancellation must not lose the final write
            await asyncio.shield(task)

    def abandon(self) -> None:
        """Safety net when a response was dropped before it was ever iterated (any thread)."""
        if self.done or self._loop.is_closed():
            return

        def abort_and_record():
            self.abort("response dropped before streaming")
            self._loop.create_task(self.close())

        try:
            self._loop.call_soon_threadsafe(abort_and_record)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _finish(self, status: str, finish_reason: str, error: str = "") -> None:
        self.done = True
        self.finish_reason = finish_reason
        self.error = error or None
        out, now = self._last, time.monotonic()
        arrival = out.arrival_time if out is not None and out.arrival_time else self._submitted_at
        finished = out.finished_time if out is not None and out.finished and out.finished_time else now
        timings = dict(
            queue_time=self._queue_time(),
            time_to_first_token=_since(arrival, out.first_token_time if out is not None else None),
            latency=max(0.0, finished - arrival),
        )
        self.metrics.on_finish(
            finish_reason=finish_reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            **timings,
        )
        self._chain(
            services.request_finish,
            request_id=self.request_id,
            status=status,
            output_text=self.text,
            choices=[choice.record() for choice in self.choices],
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            completion_tokens=self.completion_tokens,
            spec_draft_tokens=self.speculation("spec_draft_tokens"),
            spec_accepted_tokens=self.speculation("spec_accepted_tokens"),
            resumes=self.resumes,
            finish_reason=finish_reason,
            error=error,
            **timings,
        )

    def _queue_time(self) -> float | None:
        out = self._last
        if out is None:
            return None
        return _since(out.arrival_time, out.scheduled_time)

    def _chain(self, write, **kwargs) -> None:
        """Runs `write(**kwargs)` after the previous write; a failed write is logged, never raised."""
        previous = self._last_write

        async def run():
            if previous is not None:
                await asyncio.wait([previous])
            try:
                await write(**kwargs)
            except Exception:
                log.exception("request history write failed for %s", self.request_id)

        self._last_write = self._loop.create_task(run())


def guard_stream(generator, job: GenerationJob):
    """Ties a response's generator to its job: if the generator is dropped unstarted, abort."""
    weakref.finalize(generator, job.abandon)
    return generator


def live_jobs() -> set[GenerationJob]:
    return set(_live)


async def wait_for_live_jobs(timeout: float) -> bool:
    """After an engine shutdown: wait until every in-flight request has recorded its end and sent
    its last event (a job leaves the live set in its response's `finally`)."""
    deadline = time.monotonic() + timeout
    while _live:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)  # let the server flush the responses' closing messages
    return True


def _since(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, end - start)


async def _quietly(awaitable) -> None:
    try:
        await awaitable
    except Exception:
        pass
