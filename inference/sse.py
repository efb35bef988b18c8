"""Server-sent events: one `data:` line per JSON event, and the streaming response around them."""
from __future__ import annotations

import json

from django.http import StreamingHttpResponse

DONE = b"data: [DONE]\n\n"


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def response(events) -> StreamingHttpResponse:
    resp = StreamingHttpResponse(events, content_type="text/event-stream; charset=utf-8")
    resp["Cache-Control"] = "no-cache"
    resp["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return resp
