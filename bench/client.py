"""One streamed `/v1/completions` request (or `/v1/chat/completions`, for a request that carries
chat fields), timed chunk by chunk (any OpenAI-compatible server).

SSE lines are parsed by hand: with 32 concurrent streams on a 2-core machine the client shares
the CPU with the server, so it does as little per chunk as it can.
"""

from __future__ import annotations

import json
import time

import httpx

from .metrics import RequestRecord
from .prompts import BenchRequest


def request_path(request: BenchRequest) -> str:
    return "/v1/chat/completions" if request.chat else "/v1/completions"


def completion_payload(request: BenchRequest, *, model: str | None, temperature: float, ignore_eos: bool) -> dict:
    payload = {
        **(request.chat or {"prompt": request.prompt}),
        "max_tokens": request.output_len,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        payload["model"] = model
    if ignore_eos:
        payload["ignore_eos"] = True  # a vLLM extension; servers without it ignore or refuse it
    return payload


def _read_event(record: RequestRecord, data: str, now: float) -> bool:
    """Updates `record` from one `data:` payload; True at the end of the stream."""
    if data == "[DONE]":
        return True
    event = json.loads(data)
    if "error" in event:
        error = event["error"]
        record.error = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        return True
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content") or delta.get("tool_calls"):
            record.chunk_times.append(now)
        elif choice.get("finish_reason") and not record.chunk_times:
            # A reply whose tokens carried no text (one token that is part of a UTF-8 character, say):
            # it ended now. Without this, a 1-token prefill probe that drew such a token was a failure.
            record.chunk_times.append(now)
    usage = event.get("usage")
    if usage:
        record.output_tokens = usage.get("completion_tokens", record.output_tokens)
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
    return False


async def stream_completion(client: httpx.AsyncClient, url: str, payload: dict) -> RequestRecord:
    """Sends one streaming request; never raises: failures land in `record.error`."""
    record = RequestRecord(start=time.perf_counter(), wanted_tokens=payload.get("max_tokens"))
    try:
        async with client.stream("POST", url, json=payload) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode("utf-8", "replace")
                record.error = f"HTTP {response.status_code}: {body[:200]}"
                return record
            async for line in response.aiter_lines():
                if line.startswith("data:") and _read_event(record, line[5:].strip(), time.perf_counter()):
                    break
        record.end = time.perf_counter()
    except (httpx.HTTPError, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    if record.error is None and not record.chunk_times:
        record.error = "the stream carried no text"
    return record
