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
NOT_INHERITED = ("DATABASE_URL", "REDIS_URL")  # settings.py reads these outside MINIVLLM_*


def wait_healthy(process: subprocess.Popen, base_url: str, started: float, timeout: float, what: str, log_path) -> float:
    """Polls `GET /health` until 200; returns the seconds since `started` (the process's start)."""
    while time.monotonic() < started + timeout:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} (log: {log_path})")
        try:
            if httpx.get(f"{base_url}/health", timeout=5).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} was not healthy within {timeout:.0f} s (log: {log_path})")


def stop(process: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def resident_mb(process: subprocess.Popen) -> float:
    return psutil.Process(process.pid).memory_info().rss / 2**20


def launch(argv: list[str], log_path: str | None, **popen) -> tuple[subprocess.Popen, float]:
    """Starts a server with its output in `log_path` (or discarded); returns it and when it started."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    started = time.monotonic()
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **popen), started
    finally:
        if log_path:
            log.close()


def settled_resident_mb(process: subprocess.Popen, at_least_mb: float = 0.0, timeout: float = 15.0) -> float:
    """Resident memory once loading has settled: at least `at_least_mb` (our KV pool is backed by a
    background thread after /health turns 200) and unchanged over two readings."""
    deadline = time.monotonic() + timeout
    last = resident_mb(process)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = resident_mb(process)
        if now >= at_least_mb and abs(now - last) < 1.0:
            return now
        last = now
    return last


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

    def environment(self, shell: dict[str, str], database: str) -> dict[str, str]:
        """The server's environment: "no settings" means none, so the shell's MINIVLLM_* variables and
        the services it names (DATABASE_URL, REDIS_URL: a developer's Postgres or Redis) do not reach
        it, only this server's own (self.env), its throwaway SQLite file and secret key."""
        inherited = {k: v for k, v in shell.items() if not k.startswith("MINIVLLM_") and k not in NOT_INHERITED}
        env = {**inherited, **self.env, "MINIVLLM_SQLITE_PATH": database}
        env.setdefault("MINIVLLM_SECRET_KEY", secrets.token_urlsafe(32))
        return env

    def __enter__(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix="minivllm-bench-")
        env = self.environment(os.environ, os.path.join(self._tmp.name, "db.sqlite3"))
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO_ROOT, env=env, check=True, capture_output=True
        )
        self._process, started = launch(self.argv, self.log_path, cwd=REPO_ROOT, env=env)
        try:
            self.ready_s = wait_healthy(self._process, self.base_url, started, self.startup_timeout, "the server", self.log_path)
            self.stats = httpx.get(f"{self.base_url}/stats", timeout=5).json()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def resident_mb(self) -> float:
        """The server process's resident memory now."""
        return resident_mb(self._process)

    def resident_after_load_mb(self) -> float:
        """Resident memory once the weights are loaded and the KV pool backed (issue 19's measure)."""
        backed = self.stats.get("kv_pool_mb", 0) - (self.stats.get("state_pool_mb") or 0)  # state rows: as first written
        return settled_resident_mb(self._process, self.stats.get("weights_mb", 0) + backed)

    def __exit__(self, *exc) -> None:
        stop(self._process, timeout=60)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
