"""A scale-out deployment on this machine: `runengine` workers and Daphne web workers as
subprocesses, started with the commands docker-compose.yml runs, on the real Redis and
PostgreSQL (a flushed Redis database and a fresh PostgreSQL database per test module).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import httpx

from tests.support.network import free_port

from .compose import REPO, load, local_argv

REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 13
PG_URL = "postgres://postgres@127.0.0.1:5432"
START_TIMEOUT_S = 120


def unreachable() -> str | None:
    """Why the scale-out tests cannot run here, or None."""
    for name, port in (("Redis", REDIS_PORT), ("PostgreSQL", 5432)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return f"{name} is not reachable on 127.0.0.1:{port}"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -r requirements.txt)"
    return None


class Cluster:
    def __init__(self, model_dir: str, workdir: Path):
        self.workdir = workdir
        self.database = f"minivllm_scaleout_{uuid.uuid4().hex[:8]}"
        self.services = load()["services"]
        # the shell's MINIVLLM_* settings and services do not reach the servers: only the cluster's own
        shell = {k: v for k, v in os.environ.items() if not k.startswith("MINIVLLM_") and k not in ("DATABASE_URL", "REDIS_URL")}
        self.env = {
            **shell,
            "MINIVLLM_ENGINE": "remote",
            "REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
            "DATABASE_URL": f"{PG_URL}/{self.database}",
            "MINIVLLM_AUTOSTART": "1",
            "MINIVLLM_MODEL": model_dir,
            "MINIVLLM_DEVICE": "cpu",
            "MINIVLLM_DTYPE": "float32",
            "MINIVLLM_KV_CACHE_MB": "16",
            "MINIVLLM_MAX_OUTPUT_TOKENS": "8000",  # the tests' long streams outlast any reaction time
            "MINIVLLM_MAX_NUM_SEQS": "4",
            # a killed engine is noticed after this silence; long enough that a busy two-core machine
            # running four servers never misses it for a live one (the tests wait on the outcome)
            "MINIVLLM_ENGINE_TIMEOUT": "10",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
        self.engines: dict[str, subprocess.Popen] = {}
        self.webs: list[tuple[subprocess.Popen, str]] = []
        self.own_webs: list[tuple[subprocess.Popen, str]] = []  # started with settings of their own

    # ---- set-up and tear-down ---------------------------------------------------------------

    def prepare(self) -> Cluster:
        import psycopg
        import redis

        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB).flushdb()
        with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        subprocess.run(
            local_argv(["python", "manage.py", "migrate", "--noinput"]), cwd=REPO, env=self.env, check=True, capture_output=True
        )
        return self

    def start_engine(self, name: str, **env: str) -> subprocess.Popen:
        """A `runengine` worker; `env` changes its settings (another model, a folder of them)."""
        argv = local_argv(self.services["engine"]["command"])
        with open(self.workdir / f"engine-{name}.log", "wb") as log:
            process = subprocess.Popen(
                argv, cwd=REPO, env={**self.env, "MINIVLLM_ENGINE_ID": name, **env}, stdout=log, stderr=subprocess.STDOUT
            )
        self.engines[name] = process
        return process

    def start_web(self, **env: str) -> str:
        """A web worker; `env` changes its settings. One started with settings of its own is not
        among `webs` (the shared web workers): it stops with the cluster."""
        port = free_port()
        argv = local_argv(self.services["web"]["command"], port=port)
        with open(self.workdir / f"web-{port}.log", "wb") as log:
            process = subprocess.Popen(argv, cwd=REPO, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        (self.own_webs if env else self.webs).append((process, url))
        return url

    def wait_ready(self, engines: int, webs: list[tuple[subprocess.Popen, str]] | None = None) -> None:
        """Every web worker (the shared ones unless `webs` names others) healthy and hearing from
        `engines` ready engines."""
        deadline = time.monotonic() + START_TIMEOUT_S
        for process, url in self.webs if webs is None else webs:
            while True:
                assert process.poll() is None, self.logs()
                try:
                    body = httpx.get(f"{url}/health", timeout=2).json()
                    if sum(e["state"] == "ready" for e in body.get("engines", [])) == engines:
                        break
                except (httpx.TransportError, ValueError):
                    pass
                assert time.monotonic() < deadline, f"cluster did not become ready:\n{self.logs()}"
                time.sleep(0.2)

    def stop(self) -> None:
        import psycopg

        processes = [p for p, _ in self.webs + self.own_webs] + list(self.engines.values())
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    # ---- reading it ----------------------------------------------------------------------------

    def row(self, request_id: str) -> dict:
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(f"{PG_URL}/{self.database}", row_factory=dict_row) as conn:
            row = conn.execute("SELECT * FROM inference_generationrequest WHERE id = %s", (request_id,)).fetchone()
        return row or {}

    def engine_stats(self, url: str | None = None) -> dict[str, dict]:
        """Per-engine stats as a web worker sees them, by engine id."""
        url = url or self.webs[0][1]
        return {e["engine_id"]: e for e in httpx.get(f"{url}/stats", timeout=5).json()["engines"]}

    def holder(self, request_id: str, url: str | None = None) -> str | None:
        """The engine whose batch holds the request (the default model's, or any model's)."""
        url = url or self.webs[0][1]
        stats = httpx.get(f"{url}/stats", timeout=5).json()
        for slot in stats["slots"] + [slot for model in stats.get("models", []) for slot in model.get("slots") or []]:
            if slot.get("request_id") == request_id:
                return slot["engine_id"]
        return None

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.workdir.glob("*.log")))
