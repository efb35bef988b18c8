"""The README's commands, read out of README.md and run as a newcomer would: in the repository,
with none of this session's settings in the environment (no secret key, no database URL, no
MINIVLLM_* variable), `python` and `daphne` being the virtualenv's. The scale-out block runs on
the machine's Redis and PostgreSQL under a database and Redis number of its own."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from tests.scaleout.cluster import PG_URL, unreachable
from tests.support.daphne_server import REPO
from tests.support.network import free_port

pytestmark = [pytest.mark.live, pytest.mark.real_model]
README = (REPO / "README.md").read_text()
# DJANGO_SECRET_KEY: no longer read, but tests/conftest.py may still set it
SESSION_ONLY = ("MINIVLLM_", "DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL")


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SESSION_ONLY)}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def bash_blocks() -> list[list[str]]:
    return [block.strip().splitlines() for block in re.findall(r"```bash\n(.*?)```", README, re.S)]


def argv(command: str) -> list[str]:
    """A README command line as argv: the virtualenv's python and daphne, comments dropped."""
    words = shlex.split(command, comments=True)
    words = [w for w in words if w != "&"]
    if words[0] in ("python", ".venv/bin/python"):
        return [sys.executable, *words[1:]]
    if words[0] in ("daphne", ".venv/bin/daphne"):
        return [sys.executable, "-m", "daphne", *words[1:]]
    raise AssertionError(f"not a command this test knows how to run: {command}")


def test_the_one_prompt_smoke_run_works_as_written():
    [line] = [line for block in bash_blocks() for line in block if "manage.py generate --prompt" in line]
    done = subprocess.run(argv(line), cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "device: cpu" in done.stdout and "tokens/s" in done.stdout
    tokens = int(re.search(r"tokens: (\d+) \(finish_reason=(\w+)\)", done.stdout).group(1))
    assert 0 < tokens <= 60
    # the old name the README and users know
    alias = argv(line.replace("manage.py generate", "manage.py runengine").replace("60", "8"))
    done = subprocess.run(alias, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "tokens/s" in done.stdout, done.stderr[-3000:]


@pytest.mark.skipif(unreachable() is not None, reason=unreachable() or "")
def test_the_scale_out_commands_work_as_written(tmp_path):
    import psycopg

    [block] = [block for block in bash_blocks() if any("runengine &" in line for line in block)]
    export, migrate, engine, web = block
    database = f"minivllm_readme_{uuid.uuid4().hex[:8]}"
    env = {}
    for assignment in shlex.split(export)[1:]:
        name, value = assignment.split("=", 1)
        env[name] = value
    # the README's own URLs, on a database and Redis number of this test's own
    env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("/", 1)[0] + f"/{database}"
    env["REDIS_URL"] = env["REDIS_URL"].rsplit("/", 1)[0] + "/14"
    with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    processes = []
    try:
        done = subprocess.run(argv(migrate), cwd=REPO, env=clean_env(**env), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        with open(tmp_path / "engine.log", "wb") as log:
            processes.append(subprocess.Popen(argv(engine), cwd=REPO, env=clean_env(**env), stdout=log, stderr=subprocess.STDOUT))
        port = free_port()
        web_words = shlex.split(web, comments=True)
        web_env = dict(w.split("=", 1) for w in web_words if "=" in w and not w.startswith("-"))
        web_argv = argv(" ".join(w for w in web_words if w not in (f"{k}={v}" for k, v in web_env.items())))
        web_argv[web_argv.index("-p") + 1] = str(port)
        web_argv[web_argv.index("-b") + 1] = "127.0.0.1"
        with open(tmp_path / "web.log", "wb") as log:
            processes.append(
                subprocess.Popen(web_argv, cwd=REPO, env=clean_env(**env, **web_env), stdout=log, stderr=subprocess.STDOUT)
            )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert all(p.poll() is None for p in processes), (tmp_path / "engine.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()[-3000:]
            time.sleep(0.25)
        body = {"prompt": "Hello", "max_tokens": 4, "n": 2, "ignore_eos": True}
        answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
        assert [c["index"] for c in answer["choices"]] == [0, 1] and answer["usage"]["completion_tokens"] == 8
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    assert [p.returncode for p in processes] == [0, 0]
