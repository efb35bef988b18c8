"""OpenAI's Responses replies: the response object and its typed stream events.

Output items are a `message` (one `output_text` part, when there is text) and then one
`function_call` per call read out of the reply (api/common/tool_parsers.py). A reply cut by
`max_output_tokens` is `status: incomplete` with `incomplete_details.reason`. A stream sends
`response.created` and `response.in_progress`, text as `response.output_text.delta`s (held back
while they may be the start of a call: CallHoldback), each call as an item with its arguments in
one `response.function_call_arguments.delta`, then `response.completed` (also for an incomplete
reply, whose status says so);
every event carries its `sequence_number`. With `include: ["message.output_text.logprobs"]` the
output text's tokens carry their logprobs (and `top_logprobs` alternatives), on the whole text and
on each delta (the tokens behind its text). A failure is an `error` event and `response.failed`.
Once the reply is whole, `on_done(response)` runs (the view stores it) before the last event.
The stream is a ResponsesStream: the item it has open (an OpenMessage or OpenReasoning) builds
its own events, each call is an OpenFunctionCall, and the stream numbers what they give.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

from ...engine.outputs import TokenLogprob
from ...serving.jobs import Choice, GenerationJob
from ..common import sse
from ..common.chat_messages import arguments_object, call_object
from ..common.reasoning_parsers import ReplyReasoning, split_delta
from ..common.tool_calls import ToolCall, ToolRequest
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


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def logprobs_of(items: list[TokenLogprob]) -> list[dict]:
    """OpenAI's Responses logprobs: per token its text, logprob, bytes and top alternatives."""
    return [
        {
            "token": item.token,
            "logprob": item.logprob,
            "bytes": _bytes(item.token),
            "top_logprobs": [{"token": text, "logprob": lp, "bytes": _bytes(text)} for _, text, lp in item.top],
        }
        for item in items
    ]


def answer_logprobs(choice: Choice) -> list[TokenLogprob]:
    """The tokens behind the choice's answer: all of them for a plain reply; where reasoning or
    calls were taken out of the text, those whose text overlaps the answer's."""
    answer = choice.answer
    if not answer or not choice.logprobs:
        return []
    if answer == choice.text:
        return list(choice.logprobs)
    start = choice.text.find(answer, len(choice.reasoning or ""))
    if start < 0:
        return []
    end, offset, kept = start + len(answer), 0, []
    for item in choice.logprobs:
        if offset + len(item.token) > start and offset < end:
            kept.append(item)
        offset += len(item.token)
    return kept


def output_text(text: str, logprobs: list[dict] | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(item_id: str, text: str, status: str, logprobs: list[dict] | None = None) -> dict:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [output_text(text, logprobs)] if text else [],
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


def reply_turn(output: list[dict]) -> dict:
    """A response's output as the assistant turn a continuation (previous_response_id) renders:
    its text, its calls as `tool_calls` under the call ids the client answers with; its
    reasoning left out, as templates leave it out."""
    text = "".join(part.get("text", "") for item in output if item["type"] == "message" for part in item["content"])
    calls = [
        call_object(item["call_id"], item["name"], arguments_object(item["arguments"], "arguments"))
        for item in output
        if item["type"] == "function_call"
    ]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


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

    @property
    def wants_logprobs(self) -> bool:
        return self.job.params.logprobs is not None

    def response_object(self, status: str, output: list[dict], *, with_usage: bool) -> dict:
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

    def status_of(self, choice: Choice) -> str:
        if self.job.finish_reason in ("error", "abort"):
            return "failed"
        return "incomplete" if choice.finish_reason == "length" else "completed"

    def _output(self, choice: Choice) -> list[dict]:
        text = choice.answer
        status = "incomplete" if choice.finish_reason == "length" else "completed"
        items = [reasoning_item(self.reasoning_id, choice.reasoning, "completed")] if choice.reasoning else []
        logprobs = logprobs_of(answer_logprobs(choice)) if self.wants_logprobs else None
        items += [message_item(self.message_id, text, status, logprobs)] if text else []
        return items + [function_call_item(call) for call in choice.tool_calls]

    def final(self) -> dict:
        """The whole response, once the job has finished."""
        choice = self.job.choices[0]
        return self.response_object(self.status_of(choice), self._output(choice), with_usage=True)

    def body(self) -> dict:
        return self.final()

    async def finish(self) -> dict:
        """The final response, handed to `on_done` (stored) first."""
        response = self.final()
        if self.on_done is not None and response["status"] != "failed":
            await self.on_done(response)
        return response

    def stream(self):
        """The typed event stream (SSE bytes): ResponsesStream below."""
        return ResponsesStream(self).events()


Event = tuple[str, dict]  # an event's type and fields, before the stream numbers it


@dataclasses.dataclass
class OpenItem:
    """An output item a stream has open, its text as the deltas build it."""

    item_id: str
    output_index: int
    text: str = ""
    logprobs: list[dict] = dataclasses.field(default_factory=list)  # a message's, with include

    def where(self) -> dict:
        return {"item_id": self.item_id, "output_index": self.output_index, "content_index": 0}

    def opening(self) -> list[Event]:
        raise NotImplementedError

    def delta(self, text: str, logprobs: list[dict]) -> Event:
        raise NotImplementedError

    def closing(self, status: str) -> list[Event]:
        """`status` is the message's: incomplete when the reply was cut by max_output_tokens."""
        raise NotImplementedError


@dataclasses.dataclass
class OpenMessage(OpenItem):
    """An open `message` item, with its one `output_text` part."""

    def opening(self) -> list[Event]:
        added = {"output_index": self.output_index, "item": message_item(self.item_id, "", "in_progress")}
        return [("response.output_item.added", added), ("response.content_part.added", {**self.where(), "part": output_text("")})]

    def delta(self, text: str, logprobs: list[dict]) -> Event:
        self.text += text
        self.logprobs += logprobs
        return "response.output_text.delta", {**self.where(), "delta": text, "logprobs": logprobs}

    def closing(self, status: str) -> list[Event]:
        return [
            ("response.output_text.done", {**self.where(), "text": self.text, "logprobs": self.logprobs}),
            ("response.content_part.done", {**self.where(), "part": output_text(self.text, self.logprobs)}),
            (
                "response.output_item.done",
                {"output_index": self.output_index, "item": message_item(self.item_id, self.text, status, self.logprobs)},
            ),
        ]


@dataclasses.dataclass
class OpenReasoning(OpenItem):
    """An open `reasoning` item."""

    def opening(self) -> list[Event]:
        return [
            (
                "response.output_item.added",
                {"output_index": self.output_index, "item": reasoning_item(self.item_id, "", "in_progress")},
            )
        ]

    def delta(self, text: str, logprobs: list[dict]) -> Event:
        self.text += text
        return "response.reasoning_text.delta", {**self.where(), "delta": text}

    def closing(self, status: str) -> list[Event]:
        """A reasoning item ends completed whatever the reply's status (as `_output` writes it)."""
        item = reasoning_item(self.item_id, self.text, "completed")
        return [
            ("response.reasoning_text.done", {**self.where(), "text": self.text}),
            ("response.output_item.done", {"output_index": self.output_index, "item": item}),
        ]


@dataclasses.dataclass
class OpenFunctionCall:
    """A `function_call` item, opened and closed at once when the reply is whole: its arguments in one delta."""

    call: ToolCall
    output_index: int

    def events(self) -> list[Event]:
        item, where = function_call_item(self.call), {"output_index": self.output_index}
        return [
            ("response.output_item.added", {**where, "item": {**item, "arguments": "", "status": "in_progress"}}),
            ("response.function_call_arguments.delta", {"item_id": item["id"], **where, "delta": self.call.arguments}),
            (
                "response.function_call_arguments.done",
                {"item_id": item["id"], **where, "arguments": self.call.arguments, "name": self.call.name},
            ),
            ("response.output_item.done", {**where, "item": item}),
        ]


class ResponsesStream:
    """One reply's typed events, numbered in order. Reasoning and text deltas go to the open item
    of their kind (a delta of the other kind closes it and opens the next output index); once the
    reply is whole, the held-back text, the open item's close, then each call as its own item."""

    def __init__(self, reply: ResponsesReply):
        self.reply = reply
        self.sequence = 0  # the next event's sequence_number
        self.opened = 0  # output items opened so far: the next one's output_index
        self.open: OpenItem | None = None
        self.holdback = CallHoldback(reply.tools.parser) if reply.tools is not None else None
        self.splitter = reply.reasoning.splitter() if reply.reasoning is not None else None
        self.pending: list[TokenLogprob] = []  # tokens of answer text not sent yet (held back)

    def event(self, kind: str, **fields) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse.named_event(kind, payload)

    def send(self, events: list[Event]) -> Iterator[bytes]:
        for kind, fields in events:
            yield self.event(kind, **fields)

    def delta(self, kind: type[OpenItem], item_id: str, text: str, logprobs: list[dict] | None = None) -> Iterator[bytes]:
        """A text or reasoning delta, opening its item (and closing the one before) as needed."""
        if not isinstance(self.open, kind):
            yield from self.close()
            self.open = kind(item_id, self.opened)
            self.opened += 1
            yield from self.send(self.open.opening())
        yield from self.send([self.open.delta(text, logprobs or [])])

    def text(self, text: str) -> Iterator[bytes]:
        """Answer text, with the logprobs of the tokens behind it so far (include asked for them)."""
        logprobs = logprobs_of(self.pending) if self.reply.wants_logprobs else None
        self.pending = []
        return self.delta(OpenMessage, self.reply.message_id, text, logprobs)

    def close(self) -> Iterator[bytes]:
        if self.open is not None:
            status = "incomplete" if self.reply.job.choices[0].finish_reason == "length" else "completed"
            yield from self.send(self.open.closing(status))
            self.open = None

    def split(self, text: str, ended: bool, logprobs: list[TokenLogprob] | None = None) -> Iterator[bytes]:
        reasoning, answer = split_delta(self.splitter, text, ended)
        if reasoning:
            yield from self.delta(OpenReasoning, self.reply.reasoning_id, reasoning)
        if answer and logprobs:  # an output of reasoning alone: its tokens are no answer text's
            self.pending += logprobs
        answer = self.holdback.add(0, answer) if self.holdback is not None and answer else answer
        if answer:
            yield from self.text(answer)

    async def events(self):
        reply, job = self.reply, self.reply.job
        try:
            skeleton = reply.response_object("in_progress", [], with_usage=False)
            yield self.event("response.created", response=skeleton)
            yield self.event("response.in_progress", response=skeleton)
            async for out in job:
                for chunk in self.split(out.text, out.finish_reason is not None or out.finished, out.logprobs):
                    yield chunk
            await job.wait_recorded()
            choice = job.choices[0]
            if reply.status_of(choice) == "failed":
                yield self.event("error", code="server_error", message=job.error or "generation failed", param=None)
                yield self.event("response.failed", response=reply.response_object("failed", [], with_usage=True))
                return
            if self.holdback is not None:
                rest = self.holdback.unshown(0, choice.content) if choice.tool_calls else self.holdback.rest(0)
                for chunk in self.text(rest) if rest else ():
                    yield chunk
            response = await reply.finish()
            for chunk in self.close():
                yield chunk
            for number, call in enumerate(choice.tool_calls, start=self.opened):
                for chunk in self.send(OpenFunctionCall(call, number).events()):
                    yield chunk
            # an incomplete reply ends with response.completed too (its status says incomplete), as
            # vLLM does: the official client's stream helper finalises on that event only
            yield self.event("response.completed", response=response)
        finally:
            await job.close()
