"""A job's outputs rendered per API: the seed's /generate events and OpenAI's chunks.

Each generator ends in `finally: await job.close()`, so a client that goes away mid-stream
(CancelledError at an await, or GeneratorExit at a yield) aborts its engine request and gets an
`aborted` row. The CancelledError is never swallowed.
"""

from __future__ import annotations

import time

from ..engine.outputs import TokenLogprob
from ..serving.jobs import GenerationJob
from . import openai_format as oai
from . import sse


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
                    "usage": oai.usage(job.prompt_tokens, job.completion_tokens),
                }
            )
    finally:
        await job.close()


class OpenAIStream:
    """What every chunk of one OpenAI response shares."""

    def __init__(self, job: GenerationJob, *, model: str, include_usage: bool):
        self.job = job
        self.model = model
        self.include_usage = include_usage
        self.created = int(time.time())

    def _ids(self) -> dict:
        return {"request_id": self.job.request_id, "created": self.created, "model": self.model}

    def _tail(self, object_name: str):
        """Error (if any), usage (if asked) and [DONE]; called once the row is final."""
        job = self.job
        if job.finish_reason == "error":
            yield sse.event(oai.error_body(job.error or "generation failed"))
        if self.include_usage:
            yield sse.event(
                oai.usage_chunk(
                    **self._ids(),
                    object_name=object_name,
                    prompt_tokens=job.prompt_tokens,
                    completion_tokens=job.completion_tokens,
                )
            )
        yield sse.DONE

    async def completion_chunks(self):
        job, offset = self.job, 0
        try:
            async for out in job:
                reason = out.finish_reason if out.finished and out.finish_reason != "error" else None
                if out.text or out.logprobs or reason:
                    logprobs = oai.completion_logprobs(out.logprobs, offset) if job.params.logprobs is not None else None
                    offset += len(out.text)
                    yield sse.event(oai.completion_chunk(**self._ids(), text=out.text, finish_reason=reason, logprobs=logprobs))
            await job.wait_recorded()
            for chunk in self._tail("text_completion"):
                yield chunk
        finally:
            await job.close()

    async def chat_chunks(self):
        job = self.job
        try:
            yield sse.event(oai.chat_chunk(**self._ids(), delta={"role": "assistant", "content": ""}))
            async for out in job:
                if out.text or out.logprobs:
                    logprobs = oai.chat_logprobs(out.logprobs) if job.params.logprobs is not None else None
                    yield sse.event(oai.chat_chunk(**self._ids(), delta={"content": out.text}, logprobs=logprobs))
                if out.finished and out.finish_reason != "error":
                    yield sse.event(oai.chat_chunk(**self._ids(), delta={}, finish_reason=out.finish_reason))
            await job.wait_recorded()
            for chunk in self._tail("chat.completion.chunk"):
                yield chunk
        finally:
            await job.close()


async def run_to_end(job: GenerationJob) -> GenerationJob:
    """Non-streaming: consume the whole stream (a disconnect still aborts through close())."""
    try:
        async for _ in job:
            pass
    finally:
        await job.close()
    return job
