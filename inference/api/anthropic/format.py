"""Anthropic's Messages replies: the message body, its typed stream events, and its error shape.

A reply's content is a `text` block (when there is text) and then one `tool_use` block per call
read out of the reply (api/common/tool_parsers.py); `stop_reason` is `end_turn`, `max_tokens`,
`stop_sequence` (with the matched `stop_sequence`) or `tool_use`. Usage counts as Anthropic
does: `input_tokens` are the prompt tokens the prefix cache did not serve, `cache_read_input_tokens`
those it did. A stream sends `message_start` with the first output (when the cached count is
known), text as `text_delta`s held back while they may be the start of a call (CallHoldback),
each call as a `tool_use` block (`content_block_start` with an empty `input`) whose input follows
as `input_json_delta`s, pieces of the JSON text (`json_pieces`) that join to it, then
`content_block_stop`; then `message_delta` and `message_stop`; a failure mid-stream is an `error` event.
"""

from __future__ import annotations

import dataclasses
import json
import re

from django.http import JsonResponse

from ...serving.jobs import Choice, GenerationJob
from ..common import sse
from ..common.errors import ApiError
from ..common.reasoning_parsers import ReplyReasoning, split_delta
from ..common.tool_calls import ToolRequest
from ..openai.stream_format import CallHoldback

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "invalid_request_error"), "message": message}}


def error_response(error: ApiError) -> JsonResponse:
    """An ApiError in Anthropic's shape (`api_endpoint(errors=...)` on this API's views)."""
    resp = JsonResponse(error_body(error.status, error.message), status=error.status)
    for name, value in error.headers.items():
        resp[name] = value
    return resp


def tool_use_id(call) -> str:
    return "toolu_" + call.id.removeprefix("call_")


def tool_use_block(call) -> dict:
    return {"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": json.loads(call.arguments)}


def json_pieces(text: str) -> list[str]:
    """A call's input JSON as a stream sends it, in `input_json_delta`s: split after each `,` and
    `:` (as Anthropic's partial_json chunks come, pieces a client parses as partial JSON); joined,
    the pieces are the text."""
    return [piece for piece in re.split(r"(?<=[,:])", text) if piece] or [text]


def stop_fields(choice: Choice) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence) for a finished choice."""
    if choice.finish_reason == "tool_calls":
        return "tool_use", None
    if choice.finish_reason == "length":
        return "max_tokens", None
    if isinstance(choice.stop_reason, str):
        return "stop_sequence", choice.stop_reason
    return "end_turn", None


@dataclasses.dataclass
class AnthropicReply:
    """One Messages request's job (n is 1), rendered whole or as Anthropic's event stream."""

    request_id: str
    model: str
    job: GenerationJob
    tools: ToolRequest | None = None
    reasoning: ReplyReasoning | None = None  # a thinking model's reasoning becomes a `thinking` block

    def failed(self) -> GenerationJob | None:
        return self.job if self.job.finish_reason == "error" else None

    def usage(self) -> dict:
        job = self.job
        prompt = job.prompt_tokens or len(job.prompt_token_ids)
        return {
            "input_tokens": max(0, prompt - job.cached_tokens),
            "output_tokens": job.completion_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": job.cached_tokens,
        }

    def _message(self, content: list[dict], stop_reason: str | None, stop_sequence: str | None) -> dict:
        return {
            "id": self.request_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": self.usage(),
        }

    def body(self) -> dict:
        choice = self.job.choices[0]
        text = choice.answer
        content = [thinking_block(choice.reasoning)] if choice.reasoning else []
        content += [{"type": "text", "text": text}] if text else []
        content += [tool_use_block(call) for call in choice.tool_calls]
        return self._message(content, *stop_fields(choice))

    async def finish(self) -> dict:
        return self.body()

    async def stream(self):
        job, started = self.job, False
        holdback = CallHoldback(self.tools.parser) if self.tools is not None else None
        splitter = self.reasoning.splitter() if self.reasoning is not None else None
        blocks = _Blocks()

        def event(name: str, **fields) -> bytes:
            return sse.named_event(name, {"type": name, **fields})

        def text_delta(text: str):
            yield from blocks.delta("text", {"type": "text", "text": ""}, {"type": "text_delta", "text": text})

        def split(text: str, ended: bool):
            reasoning, answer = split_delta(splitter, text, ended)
            if reasoning:
                start = thinking_block("")
                yield from blocks.delta("thinking", start, {"type": "thinking_delta", "thinking": reasoning})
            answer = holdback.add(0, answer) if holdback is not None and answer else answer
            if answer:
                yield from text_delta(answer)

        try:
            async for out in job:
                if not started:
                    started = True
                    yield event("message_start", message=self._message([], None, None))
                    yield event("ping")
                for chunk in split(out.text, out.finish_reason is not None or out.finished):
                    yield chunk
            await job.wait_recorded()
            if not started:
                yield event("message_start", message=self._message([], None, None))
            if job.finish_reason in ("error", "abort"):
                yield sse.named_event("error", error_body(500, job.error or "generation failed"))
                return
            choice = job.choices[0]
            rest = ""
            if holdback is not None:
                rest = holdback.unshown(0, choice.content) if choice.tool_calls else holdback.rest(0)
            if rest:
                for chunk in text_delta(rest):
                    yield chunk
            for call in choice.tool_calls:
                block = {**tool_use_block(call), "input": {}}
                for number, piece in enumerate(json_pieces(call.arguments)):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    for chunk in blocks.delta("tool_use", block, delta, own=number == 0):
                        yield chunk
            for chunk in blocks.close():
                yield chunk
            stop_reason, stop_sequence = stop_fields(choice)
            yield event("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": stop_sequence}, usage=self.usage())
            yield event("message_stop")
        finally:
            await job.close()


def thinking_block(text: str) -> dict:
    # no signature: nothing here signs reasoning (clients send the block back as it came)
    return {"type": "thinking", "thinking": text, "signature": ""}


class _Blocks:
    """A stream's content blocks, opened in order: a delta of another kind (or an `own` block, one
    per tool call) closes the open block and starts the next index."""

    def __init__(self):
        self.index, self.kind = -1, None

    def close(self):
        if self.kind is not None:
            yield sse.named_event("content_block_stop", {"type": "content_block_stop", "index": self.index})
            self.kind = None

    def delta(self, kind: str, start: dict, delta: dict, own: bool = False):
        if own or kind != self.kind:
            yield from self.close()
            self.index, self.kind = self.index + 1, kind
            yield sse.named_event(
                "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": start}
            )
        yield sse.named_event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})
