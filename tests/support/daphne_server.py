"""A real Daphne in a subprocess, for every test that needs the whole server (API, browser,
reliability, security): start it, wait for /health, stop it with SIGTERM, and read its
request history straight from its own SQLite file.

Tests get servers from one session-scoped factory, the `daphne_server` fixture: `daphne_server(**settings)`
is shared by every test asking for the same settings (a real-model server loads once per session),
`daphne_server.fresh(**settings)` is a test's own, for one that stops or kills it.

The caller's MINIVLLM_* settings and DATABASE_URL never leak in: each server gets exactly the
settings its test passes (no MINIVLLM_MODEL: the embedded SmolLM2).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.network import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240  # the model loads in ~15-30 s; a busy machine is slower
TERMINAL = {"completed", "aborted", "failed", "rejected"}


class LiveServer:
    """`MINIVLLM_AUTOSTART="0"` in settings: the site without an engine, up in a second or two;
    /health stays 503 there, as while a model loads, so `start` then only waits for an answer."""

    def __init__(self, workdir: Path, **settings: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = workdir / "db.sqlite3"
        self.log = workdir / "daphne.log"
        env = {key: value for key, value in os.environ.items() if not key.startswith("MINIVLLM_")}
        env.pop("DATABASE_URL", None)
        self.env = {
            **env,
            "DATABASE_URL": f"sqlite:///{self.db}",
            "MINIVLLM_AUTOSTART": "1",
            "MINIVLLM_DEVICE": "cpu",
            "PYTHONUNBUFFERED": "1",
            "PYTHONFAULTHANDLER": "1",  # a crash writes every thread's stack into the log
            **settings,
        }
        self.engine = self.env["MINIVLLM_AUTOSTART"] == "1"
        self.process: subprocess.Popen | None = None
        self.manage("migrate", "--noinput")

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=REPO, env=self.env, check=True, capture_output=True, text=True
        )
        return done.stdout

    def start(self) -> LiveServer:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "minivllm_site.asgi:application"],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            status = self.health_status()
            if status == 200 or (status is not None and not self.engine):
                return self
            time.sleep(0.25)
        raise AssertionError(f"server did not become healthy:\n{self.log.read_text()}")

    def health_status(self) -> int | None:
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code
        except httpx.TransportError:
            return None

    def healthy(self) -> bool:
        return self.health_status() == 200

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def rss_bytes(self) -> int:
        return psutil.Process(self.process.pid).memory_info().rss

    def stats(self, headers: dict | None = None) -> dict:
        resp = httpx.get(f"{self.url}/stats", headers=headers or {}, timeout=10)
        resp.raise_for_status()
        return resp.json()

    def rows_of(self, table: str, where: str = "1=1", params: tuple = ()) -> list[dict]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            conn.row_factory = sqlite3.Row
            found = conn.execute(f"SELECT * FROM {table} WHERE {where}", params).fetchall()
        return [dict(row) for row in found]

    def rows(self, where: str = "1=1", params: tuple = ()) -> list[dict]:
        return self.rows_of("inference_generationrequest", where, params)

    def row(self, request_id: str) -> dict:
        rows = self.rows("id = ?", (request_id,))
        return rows[0] if rows else {}

    def wait_row(self, request_id: str, statuses=TERMINAL, timeout: float = 30.0) -> dict:
        """The row once it has one of `statuses` (rows are written just after the last event)."""
        deadline = time.monotonic() + timeout
        while True:
            row = self.row(request_id)
            if row.get("status") in statuses or time.monotonic() > deadline:
                return row
            time.sleep(0.05)


class LiveServers:
    """The session's servers, one per distinct settings and set-up. At most KEEP shared ones run
    at once (each may hold the real model): asking for another stops the one asked for longest ago."""

    KEEP = 2

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self._shared: OrderedDict[tuple, LiveServer] = OrderedDict()
        self._own: list[LiveServer] = []

    def __call__(self, setup: Callable[[LiveServer], None] | None = None, **settings: str) -> LiveServer:
        """The started server with these settings, shared; `setup` runs once before it starts
        (against its database: keys, users, rows a start-up must repair)."""
        key = (setup.__qualname__ if setup else None, *sorted(settings.items()))
        server = self._shared.pop(key, None)
        if server is None:
            while len(self._shared) >= self.KEEP:
                self._shared.popitem(last=False)[1].stop()
            server = self._new(setup, settings)
        elif server.process is None or server.process.poll() is not None:
            server.start()  # a test stopped it: the same database, started again
        self._shared[key] = server
        return server

    def fresh(self, setup: Callable[[LiveServer], None] | None = None, **settings: str) -> LiveServer:
        """A started server of the caller's own (stopped at the session's end if it is still running)."""
        server = self._new(setup, settings)
        self._own.append(server)
        return server

    def _new(self, setup, settings: dict) -> LiveServer:
        server = LiveServer(self._tmp.mktemp("live"), **settings)
        if setup is not None:
            setup(server)
        return server.start()

    def close(self) -> None:
        for server in [*self._shared.values(), *self._own]:
            server.stop()


@pytest.fixture(scope="session")
def daphne_server(tmp_path_factory):
    servers = LiveServers(tmp_path_factory)
    yield servers
    servers.close()


# The session's default server (make run's settings, the real model) as the OpenAI API's tests use it.
@pytest.fixture(scope="session")
def default_server(daphne_server):
    return daphne_server()


@pytest.fixture(scope="session")
def openai_client(default_server):
    import openai

    return openai.OpenAI(base_url=f"{default_server.url}/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def served_model(openai_client) -> str:
    return openai_client.models.list().data[0].id
