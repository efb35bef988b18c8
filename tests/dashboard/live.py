"""The dashboard tests' load: concurrent completions against a live server (tests/support/daphne_server.py)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import httpx

from tests.support.daphne_server import LiveServer

# > one 16-token KV block, so concurrent prompts share cached prefix blocks (the hit rate moves)
SHARED_PREFIX = (
    "You are a storyteller for a small inference server's load test. Every story is set in a quiet "
    "harbour town where the lighthouse keeper collects lost maps and the baker knows every secret. "
)


def load(server: LiveServer, pool: ThreadPoolExecutor, *, requests: int = 12, max_tokens: int = 60) -> list[Future]:
    """`requests` concurrent /v1/completions, each running its full max_tokens."""

    def one(index: int) -> int:
        body = {"prompt": f"{SHARED_PREFIX}Story {index}:", "max_tokens": max_tokens, "ignore_eos": True}
        return httpx.post(f"{server.url}/v1/completions", json=body, timeout=240).status_code

    return [pool.submit(one, index) for index in range(requests)]
