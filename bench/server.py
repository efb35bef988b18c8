"""Our server as a subprocess for the benchmark: Daphne on a free port, a throw-away SQLite file.

The database is migrated into a temporary folder so a benchmark never writes request history
into the developer's db.sqlite3. Ready means `GET /health` answers 200 (the model is loaded).
"""
from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

import httpx
import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EngineServer:
    """`with EngineServer(env) as server:` -> server.base_url, server.stats; stopped on exit."""

    def __init__(self, env: dict[str, str] | None = None, *, log_path: str | None = None, startup_timeout: float = 600.0):
        self.env = {"MINIVLLM_AUTOSTART": "1", **(env or {})}
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.stats: dict = {}
        self.ready_s = None  # seconds from start to /health 200
        self._process: subprocess.Popen | None = None
        self._tmp = None

    @property
    def argv(self) -> list[str]:
        daphne = str(Path(sys.executable).parent / "daphne")
        return [daphne, "-b", "127.0.0.1", "-p", str(self.port), "minivllm_site.asgi:application"]

    @property
    def command(self) -> str:
        """The shell command, environment included, as the report prints it."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        argv = [".venv/bin/daphne" if a.endswith("/daphne") else a for a in self.argv]
        return f"{env} {shlex.join(argv)}"

    def __enter__(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix="minivllm-bench-")
        env = {**os.environ, **self.env, "MINIVLLM_SQLITE_PATH": os.path.join(self._tmp.name, "db.sqlite3")}
        env.setdefault("MINIVLLM_SECRET_KEY", secrets.token_urlsafe(32))  # a throwaway server's own key
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO_ROOT, env=env, check=True, capture_output=True)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        started = time.monotonic()
        self._process = subprocess.Popen(self.argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        if self.log_path:
            log.close()
        try:
            self._wait_ready(started)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the server exited with code {self._process.returncode} (log: {self.log_path})")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=5).status_code == 200:
                    self.ready_s = time.monotonic() - started
                    self.stats = httpx.get(f"{self.base_url}/stats", timeout=5).json()
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"the server was not healthy within {self.startup_timeout:.0f} s (log: {self.log_path})")

    def resident_mb(self) -> float:
        """The server process's resident memory now."""
        return psutil.Process(self._process.pid).memory_info().rss / 2**20

    def __exit__(self, *exc) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
