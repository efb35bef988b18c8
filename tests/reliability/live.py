"""Request helpers the security and reliability tests share; the server is tests/live_server.py."""

from __future__ import annotations

import json

import httpx


def sse_data(lines) -> list:
    """JSON payloads of the `data:` lines of an SSE body ("[DONE]" kept as a string)."""
    events = []
    for line in lines:
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def assert_error_shape(resp: httpx.Response) -> dict:
    body = resp.json()
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, body
    assert isinstance(error["message"], str) and error["message"], body
    return error
