"""Server-sent events: one `data:` line per JSON event, and the streaming response around them."""

from __future__ import annotations

import json

from django.http import StreamingHttpResponse

DONE = b"data: [DONE]\n\n"
# Line breaks to str.splitlines (and so to httpx's line reader) that JSON leaves unescaped: a
# generated NEL or line separator would cut a client's `data:` line in two. Escaped, they decode
# to the same text.
_SPLITLINES_ONLY = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def one_line_json(payload: dict) -> bytes:
    """The payload as compact JSON on one line, whatever line breaks its strings hold (NDJSON's too)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(_SPLITLINES_ONLY).encode("utf-8")


def event(payload: dict) -> bytes:
    return b"data: " + one_line_json(payload) + b"\n\n"


def response(events, content_type: str = "text/event-stream; charset=utf-8") -> StreamingHttpResponse:
    """A streamed response of `events` (SSE; Ollama's NDJSON passes its own content type)."""
    resp = StreamingHttpResponse(events, content_type=content_type)
    resp["Cache-Control"] = "no-cache"
    resp["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return resp


def named_event(name: str, payload: dict) -> bytes:
    """An `event:` line before the data, as Anthropic's stream types each event."""
    return f"event: {name}\n".encode() + event(payload)
