"""Ports for the servers the tests start (a live Daphne, a scale-out cluster's workers)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now, chosen by the OS, so concurrent servers never collide.

    The socket is closed before the caller binds it: another process could take the port in between,
    which a test machine's quiet loopback makes unlikely enough."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
