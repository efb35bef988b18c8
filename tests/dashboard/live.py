"""The dashboard tests' server: tests/live_server.py plus a load of concurrent completions."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.live_server import LiveServer

# > one 16-token KV block, so concurrent prompts share cached prefix blocks (the hit rate moves)
SHARED_PREFIX = (
    "You are a storyteller for a small inference server's load test. Every story is set in a quiet "
    "harbour town where the lighthouse keeper collects lost maps and the baker knows every secret. "
)


class DashboardServer(LiveServer):
    """`engine=False`: the site without an engine (/health stays 503, as while a model loads)."""

    def __init__(self, workdir: Path, *, engine: bool = True):
        super().__init__(workdir, MINIVLLM_AUTOSTART="1" if engine else "0")

    def load(self, pool: ThreadPoolExecutor, *, requests: int = 12, max_tokens: int = 60) -> list[Future]:
        """`requests` concurrent /v1/completions, each running its full max_tokens."""

        def one(index: int) -> int:
            body = {"prompt": f"{SHARED_PREFIX}Story {index}:", "max_tokens": max_tokens, "ignore_eos": True}
            return httpx.post(f"{self.url}/v1/completions", json=body, timeout=240).status_code

        return [pool.submit(one, index) for index in range(requests)]
