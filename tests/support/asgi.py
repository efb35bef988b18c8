"""Requests into the site's ASGI application in this process, without a server: Django's async
test client for whole requests, and a raw HTTP scope for asgiref's ApplicationCommunicator when a
test must act mid-response (a client that disconnects while a stream is running)."""

from __future__ import annotations


async def post(client, path: str, body: dict):
    """POST `body` as JSON with Django's AsyncClient (the `async_client` fixture)."""
    return await client.post(path, body, content_type="application/json")


def http_scope(path: str) -> dict:
    """The scope of a JSON POST to `path`, as Daphne would hand it to the application."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
