"""A real Daphne serving the real embedded SmolLM2 (or no engine), for the browser tests: start,
stop, restart on the same port, read a history row from its own SQLite file, and put a load on it."""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240  # the model loads in ~15 s on an idle machine; a busy one is slower
# > one 16-token KV block, so concurrent prompts share cached prefix blocks (the hit rate moves)
SHARED_PREFIX = (
    "You are a storyteller for a small inference server's load test. Every story is set in a quiet "
    "harbour town where the lighthouse keeper collects lost maps and the baker knows every secret. "
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DashboardServer:
    """`engine=False`: the site without an engine (MINIVLLM_AUTOSTART=0), up in a second or two;
    /health stays 503 there, as while a model loads."""

    def __init__(self, workdir: Path, *, engine: bool = True):
        self.engine = engine
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = workdir / "db.sqlite3"
        self.log = workdir / "daphne.log"
        env = {key: value for key, value in os.environ.items() if not key.startswith("MINIVLLM_")}
        env.pop("DATABASE_URL", None)
        self.env = {
            **env,  # no MINIVLLM_MODEL: the embedded SmolLM2 default
            "DATABASE_URL": f"sqlite:///{self.db}",
            "MINIVLLM_AUTOSTART": "1" if engine else "0",
            "MINIVLLM_DEVICE": "cpu",
            "PYTHONUNBUFFERED": "1",
        }
        self.process: subprocess.Popen | None = None
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO, env=self.env, check=True, capture_output=True)

    def start(self) -> "DashboardServer":
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "minivllm_site.asgi:application"],
                cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                status = httpx.get(f"{self.url}/health", timeout=2).status_code
                if status == 200 or not self.engine:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"server did not become healthy:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def row(self, request_id: str) -> dict:
        with sqlite3.connect(self.db) as conn:
            conn.row_factory = sqlite3.Row
            row = conn.execute("SELECT * FROM inference_generationrequest WHERE id = ?", (request_id,)).fetchone()
        return dict(row) if row else {}

    def load(self, pool: ThreadPoolExecutor, *, requests: int = 12, max_tokens: int = 60) -> list[Future]:
        """`requests` concurrent /v1/completions, each running its full max_tokens."""

        def one(index: int) -> int:
            body = {"prompt": f"{SHARED_PREFIX}Story {index}:", "max_tokens": max_tokens, "ignore_eos": True}
            return httpx.post(f"{self.url}/v1/completions", json=body, timeout=240).status_code

        return [pool.submit(one, index) for index in range(requests)]
