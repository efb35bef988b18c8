"""Server-sent events: one `data:` line per JSON event, and the streaming response around them."""

from __future__ import annotations

import json

from django.http import StreamingHttpResponse

DONE = b"data: [DONE]\n\n"
# Line breaks to str.splitlines (and so to httpx's line reader) that JSON leaves unescaped: a
# generated NEL or line separator would cut a client's `data:` line in two. Escaped, they decode
# to the same text.
_SPLITLINES_ONLY = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def event(payload: dict) -> bytes:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(_SPLITLINES_ONLY)
    return b"data: " + text.encode("utf-8") + b"\n\n"


def response(events) -> StreamingHttpResponse:
    resp = StreamingHttpResponse(events, content_type="text/event-stream; charset=utf-8")
    resp["Cache-Control"] = "no-cache"
    resp["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return resp


def named_event(name: str, payload: dict) -> bytes:
    """An `event:` line before the data, as Anthropic's stream types each event."""
    return f"event: {name}\n".encode() + event(payload)
