"""OpenAI's Responses replies: the response object and its typed stream events.

Output items are a `message` (one `output_text` part, when there is text) and then one
`function_call` per call read out of the reply (api/common/tool_parsers.py). A reply cut by
`max_output_tokens` is `status: incomplete` with `incomplete_details.reason`. A stream sends
`response.created` and `response.in_progress`, text as `response.output_text.delta`s (held back
while they may be the start of a call: CallHoldback), each call as an item with its arguments in
one `response.function_call_arguments.delta`, then `response.completed` (also for an incomplete
reply, whose status says so);
every event carries its `sequence_number`. A failure is an `error` event and `response.failed`.
Once the reply is whole, `on_done(response)` runs (the view stores it) before the last event.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable

from ...serving.jobs import Choice, GenerationJob
from ..common import sse
from ..common.reasoning_parsers import ReplyReasoning, split_delta
from ..common.tool_calls import ToolRequest
from ..openai.stream_format import CallHoldback


def usage(job: GenerationJob) -> dict:
    prompt = job.prompt_tokens or len(job.prompt_token_ids)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": job.cached_tokens},
        "output_tokens": job.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": job.reasoning_tokens},
        "total_tokens": prompt + job.completion_tokens,
    }


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [output_text(text)] if text else [],
    }


def reasoning_item(item_id: str, text: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}] if text else [],
        "encrypted_content": None,
        "status": status,
    }


def function_call_item(call, status: str = "completed") -> dict:
    return {
        "id": "fc_" + call.id.removeprefix("call_"),
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }


@dataclasses.dataclass
class ResponsesReply:
    """One Responses request's job (n is 1), rendered whole or as the typed event stream."""

    request_id: str
    model: str
    job: GenerationJob
    echoed: dict  # the request's settings the response object repeats
    tools: ToolRequest | None = None
    on_done: Callable[[dict], Awaitable[None]] | None = None
    reasoning: ReplyReasoning | None = None  # a thinking model's reasoning becomes a `reasoning` item
    created_at: int = dataclasses.field(default_factory=lambda: int(time.time()))
    message_id: str = dataclasses.field(default_factory=lambda: f"msg_{uuid.uuid4().hex}")
    reasoning_id: str = dataclasses.field(default_factory=lambda: f"rs_{uuid.uuid4().hex}")

    def failed(self) -> GenerationJob | None:
        return self.job if self.job.finish_reason == "error" else None

    def _response(self, status: str, output: list[dict], *, with_usage: bool) -> dict:
        choice = self.job.choices[0]
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        error = {"code": "server_error", "message": self.job.error or "generation failed"} if status == "failed" else None
        return {
            "id": self.request_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": usage(self.job) if with_usage else None,
            "incomplete_details": incomplete if choice.finish_reason else None,
            "error": error,
            **self.echoed,
        }

    def _status(self, choice: Choice) -> str:
        if self.job.finish_reason in ("error", "abort"):
            return "failed"
        return "incomplete" if choice.finish_reason == "length" else "completed"

    def _output(self, choice: Choice) -> list[dict]:
        text = choice.answer
        status = "incomplete" if choice.finish_reason == "length" else "completed"
        items = [reasoning_item(self.reasoning_id, choice.reasoning, "completed")] if choice.reasoning else []
        items += [message_item(self.message_id, text, status)] if text else []
        return items + [function_call_item(call) for call in choice.tool_calls]

    def final(self) -> dict:
        """The whole response, once the job has finished."""
        choice = self.job.choices[0]
        return self._response(self._status(choice), self._output(choice), with_usage=True)

    def body(self) -> dict:
        return self.final()

    async def finish(self) -> dict:
        """The final response, handed to `on_done` (stored) first."""
        response = self.final()
        if self.on_done is not None and response["status"] != "failed":
            await self.on_done(response)
        return response

    async def stream(self):
        job, sequence, opened = self.job, 0, []  # opened: [kind, item id, output index, text so far]
        holdback = CallHoldback(self.tools.parser) if self.tools is not None else None
        splitter = self.reasoning.splitter() if self.reasoning is not None else None

        def event(kind: str, **fields) -> bytes:
            nonlocal sequence
            payload = {"type": kind, "sequence_number": sequence, **fields}
            sequence += 1
            return sse.named_event(kind, payload)

        def where(item) -> dict:
            return {"item_id": item[1], "output_index": item[2], "content_index": 0}

        def delta(kind: str, text: str):
            """A text or reasoning delta, opening its item (and closing the one before) as needed."""
            if not opened or opened[-1][0] != kind:
                if opened:
                    yield from close(opened[-1])
                item = [kind, self.reasoning_id if kind == "reasoning" else self.message_id, len(opened), ""]
                opened.append(item)
                if kind == "reasoning":
                    yield event(
                        "response.output_item.added", output_index=item[2], item=reasoning_item(item[1], "", "in_progress")
                    )
                else:
                    yield event("response.output_item.added", output_index=item[2], item=message_item(item[1], "", "in_progress"))
                    yield event("response.content_part.added", **where(item), part=output_text(""))
            item = opened[-1]
            item[3] += text
            name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            yield event(name, **where(item), delta=text, **({} if kind == "reasoning" else {"logprobs": []}))

        def close(item):
            kind, item_id, index, text = item
            if kind == "reasoning":
                yield event("response.reasoning_text.done", **where(item), text=text)
                yield event("response.output_item.done", output_index=index, item=reasoning_item(item_id, text, "completed"))
            else:
                yield event("response.output_text.done", **where(item), text=text, logprobs=[])
                yield event("response.content_part.done", **where(item), part=output_text(text))
                status = "incomplete" if job.choices[0].finish_reason == "length" else "completed"
                yield event("response.output_item.done", output_index=index, item=message_item(item_id, text, status))
            item[0] = "closed"

        def split(text: str, ended: bool):
            reasoning, answer = split_delta(splitter, text, ended)
            if reasoning:
                yield from delta("reasoning", reasoning)
            answer = holdback.add(0, answer) if holdback is not None and answer else answer
            if answer:
                yield from delta("message", answer)

        try:
            skeleton = self._response("in_progress", [], with_usage=False)
            yield event("response.created", response=skeleton)
            yield event("response.in_progress", response=skeleton)
            async for out in job:
                for chunk in split(out.text, out.finish_reason is not None or out.finished):
                    yield chunk
            await job.wait_recorded()
            choice = job.choices[0]
            if self._status(choice) == "failed":
                message = job.error or "generation failed"
                yield event("error", code="server_error", message=message, param=None)
                yield event("response.failed", response=self._response("failed", [], with_usage=True))
                return
            if holdback is not None:
                rest = holdback.unshown(0, choice.content) if choice.tool_calls else holdback.rest(0)
                for chunk in delta("message", rest) if rest else ():
                    yield chunk
            response = await self.finish()
            if opened and opened[-1][0] != "closed":
                for chunk in close(opened[-1]):
                    yield chunk
            for number, call in enumerate(choice.tool_calls, start=len(opened)):
                item = function_call_item(call)
                yield event(
                    "response.output_item.added", output_index=number, item={**item, "arguments": "", "status": "in_progress"}
                )
                yield event(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=number, delta=call.arguments
                )
                yield event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=number,
                    arguments=call.arguments,
                    name=call.name,
                )
                yield event("response.output_item.done", output_index=number, item=item)
            # an incomplete reply ends with response.completed too (its status says incomplete), as
            # vLLM does: the official client's stream helper finalises on that event only
            yield event("response.completed", response=response)
        finally:
            await job.close()
