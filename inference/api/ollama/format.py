"""Ollama's replies: one JSON object, or newline-delimited JSON objects as the text comes, and
Ollama's error shape ({"error": message}).

/api/chat's chunks carry `message` ({"role": "assistant", "content"}, with `thinking` for a
thinking model's reasoning and `tool_calls`, arguments as objects, once the reply is read);
/api/generate's carry `response` (and `thinking`). The last object has `done: true`, `done_reason`
("stop", "length", "abort"; a generate with no prompt answers "load" at once) and Ollama's counts and timings in nanoseconds: `total_duration`,
`load_duration` (0: the model was loaded), `prompt_eval_count` / `prompt_eval_duration` (to the
first token) and `eval_count` / `eval_duration`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time

from django.http import JsonResponse, StreamingHttpResponse

from ...serving.jobs import Choice, GenerationJob
from ..common import sse
from ..common.errors import ApiError
from ..common.reasoning_parsers import ReplyReasoning, split_delta
from ..common.tool_calls import ToolRequest
from ..openai.stream_format import CallHoldback


def error_response(error: ApiError) -> JsonResponse:
    """An ApiError in Ollama's shape (`api_endpoint(errors=...)` on this API's views)."""
    resp = JsonResponse({"error": error.message}, status=error.status)
    for name, value in error.headers.items():
        resp[name] = value
    return resp


def ndjson_response(lines) -> StreamingHttpResponse:
    return sse.response(lines, content_type="application/x-ndjson")


def line(payload: dict) -> bytes:
    return sse.one_line_json(payload) + b"\n"


def created_at() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def tool_call_objects(choice: Choice) -> list[dict]:
    return [{"function": {"name": call.name, "arguments": json.loads(call.arguments)}} for call in choice.tool_calls]


@dataclasses.dataclass
class OllamaReply:
    """One /api/chat or /api/generate job, rendered whole or as NDJSON."""

    kind: str  # "chat" or "generate"
    model: str
    job: GenerationJob
    tools: ToolRequest | None = None
    reasoning: ReplyReasoning | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)

    def failed(self) -> GenerationJob | None:
        return self.job if self.job.finish_reason == "error" else None

    def _chunk(self, content: str, thinking: str = "", calls: list[dict] | None = None) -> dict:
        head = {"model": self.model, "created_at": created_at()}
        if self.kind == "generate":
            return {**head, "response": content, **({"thinking": thinking} if thinking else {}), "done": False}
        message = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        return {**head, "message": message, "done": False}

    def _done(self, chunk: dict) -> dict:
        job, now = self.job, time.monotonic()
        first = min(max(job.first_token_time or now, self.started), now)
        reason = {"length": "length", "abort": "abort"}.get(job.choices[0].finish_reason or "", "stop")
        return {
            **chunk,
            "done": True,
            "done_reason": reason,
            "total_duration": int((now - self.started) * 1e9),
            "load_duration": 0,
            "prompt_eval_count": job.prompt_tokens or len(job.prompt_token_ids),
            "prompt_eval_duration": int((first - self.started) * 1e9),
            "eval_count": job.completion_tokens,
            "eval_duration": int((now - first) * 1e9),
        }

    async def finish(self) -> dict:
        choice = self.job.choices[0]
        calls = tool_call_objects(choice) if self.tools is not None else []
        text = choice.answer if self.tools is None or not calls else (choice.content or "")
        return self._done(self._chunk(text, choice.reasoning or "", calls))

    async def stream(self):
        job = self.job
        holdback = CallHoldback(self.tools.parser) if self.tools is not None else None
        splitter = self.reasoning.splitter() if self.reasoning is not None else None
        try:
            async for out in job:
                thinking, answer = split_delta(splitter, out.text, out.finish_reason is not None or out.finished)
                answer = holdback.add(0, answer) if holdback is not None and answer else answer
                if thinking or answer:
                    yield line(self._chunk(answer, thinking))
            await job.wait_recorded()
            if job.finish_reason in ("error", "abort"):
                yield line({"error": job.error or "generation failed"})
                return
            choice = job.choices[0]
            rest = ""
            if holdback is not None:
                rest = holdback.unshown(0, choice.content) if choice.tool_calls else holdback.rest(0)
            calls = tool_call_objects(choice) if self.tools is not None else []
            if calls:
                yield line(self._chunk(rest, calls=calls))
                rest = ""
            yield line(self._done(self._chunk(rest)))
        finally:
            await job.close()
