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
        # the server's token counts on every chunk: ours' and vLLM's usage, llama-server's timings
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "timings_per_token": True,
    }
    if model:
        payload["model"] = model
    if ignore_eos:
        payload["ignore_eos"] = True  # a vLLM extension; servers without it ignore or refuse it
    return payload


def read_event(record: RequestRecord, data: str, now: float) -> bool:
    """Updates `record` from one `data:` payload; True at the end of the stream."""
    if data == "[DONE]":
        return True
    event = json.loads(data)
    if "error" in event:
        error = event["error"]
        record.error = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        return True
    choices = event.get("choices") or ()
    usage = event.get("usage")
    count = _tokens_so_far(event) if choices else None
    if count is not None:  # the server counts its tokens: time each when its chunk came
        if count > record.counted:
            record.chunk_times.append(now)
            record.chunk_tokens.append(count - record.counted)
            record.counted = count
    else:
        for choice in choices:
            delta = choice.get("delta") or {}
            text = choice.get("text") or delta.get("content") or delta.get("tool_calls")
            # (a reply whose tokens carried no text, one token that is half a UTF-8 character, say,
            # ended at its finish: without this a 1-token prefill probe that drew one was a failure)
            if text or (choice.get("finish_reason") and not record.chunk_times):
                record.chunk_times.append(now)
                record.chunk_tokens.append(1)
                record.counted += 1  # (a later counted chunk must not bring this one again)
    if usage:
        record.output_tokens = usage.get("completion_tokens", record.output_tokens)
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
    return False


def _tokens_so_far(event: dict) -> int | None:
    """The tokens the server says it has sent, counted on this chunk, or None where it does not say."""
    usage, timings = event.get("usage"), event.get("timings")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return usage["completion_tokens"]
    if isinstance(timings, dict) and isinstance(timings.get("predicted_n"), int):
        return timings["predicted_n"]
    return None


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
                if line.startswith("data:") and read_event(record, line[5:].strip(), time.perf_counter()):
                    break
        record.end = time.perf_counter()
    except (httpx.HTTPError, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    if record.error is None and not record.chunk_times:
        record.error = "the stream carried no text"
    return record
