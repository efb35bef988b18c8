"""The tests' one reader of what the API sends: server-sent events, from a live server's lines
(httpx) or the Django test client's byte chunks, and the error envelope."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator

import httpx

DATA = "data: "


def event_of(line: str):
    """The JSON payload of one `data:` line ("[DONE]" kept as a string), or None for any other line."""
    if not line.startswith(DATA):
        return None
    payload = line[len(DATA) :]
    return payload if payload == "[DONE]" else json.loads(payload)


def events_of(lines: Iterable[str]) -> list:
    """Every event of a body's lines, in order."""
    return [event for event in map(event_of, lines) if event is not None]


async def aevents_of(lines) -> list:
    """The same for an async line iterator (httpx's aiter_lines)."""
    return [event async for line in lines if (event := event_of(line)) is not None]


def read_until(lines: Iterator[str], done: Callable[[object], bool]) -> list:
    """Events read up to and including the first one `done` accepts; the rest stay in `lines`."""
    events = []
    for line in lines:
        event = event_of(line)
        if event is not None:
            events.append(event)
            if done(event):
                break
    return events


def carries_text(event) -> bool:
    """A /generate token event, or an OpenAI chunk with generated text: the request is running."""
    if not isinstance(event, dict):
        return False
    if event.get("type") == "token":
        return True
    choices = event.get("choices") or [{}]
    return bool(choices[0].get("text") or (choices[0].get("delta") or {}).get("content"))


def events_of_chunks(chunks: list[bytes]) -> list:
    """Every event of a streamed Django response's chunks; anything but `data:` blocks fails."""
    events = []
    for block in b"".join(chunks).decode("utf-8").split("\n\n"):
        block = block.strip()
        if block:
            assert block.startswith(DATA), block
            events.append(event_of(block))
    return events


async def read_stream(response) -> list:
    """Every event of a Django test client's streaming response."""
    return events_of_chunks([chunk async for chunk in response.streaming_content])


def assert_error_shape(resp: httpx.Response) -> dict:
    """The API's error envelope, OpenAI's: {"error": {message, type, param, code}}; returns the error."""
    body = resp.json()
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, body
    assert isinstance(error["message"], str) and error["message"], body
    return error


def named_events_of_chunks(chunks: list[bytes]) -> list[tuple[str, dict]]:
    """(event name, payload) of each block of a stream that names its events (Anthropic's); the
    name must equal the payload's `type`."""
    events = []
    for block in b"".join(chunks).decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        name_line, data_line = block.strip().split("\n")
        assert name_line.startswith("event: ") and data_line.startswith(DATA), block
        name, payload = name_line[len("event: ") :], json.loads(data_line[len(DATA) :])
        assert payload["type"] == name, block
        events.append((name, payload))
    return events


async def read_named_stream(response) -> list[tuple[str, dict]]:
    return named_events_of_chunks([chunk async for chunk in response.streaming_content])
