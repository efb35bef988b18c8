"""The API tests' own shared fixtures: the real Qwen2.5-Coder-0.5B-Instruct GGUF served once per
session, for the tool-calling and Agents SDK tests (tests/api/test_tools_qwen.py,
tests/api/test_agents_live.py), and the real Gemma 3 270M's (tests/api/test_gemma3_live.py and the
numerics against float32, tests/api/test_numerics_live.py)."""

from __future__ import annotations

import pytest

from tests.support import real_gguf


@pytest.fixture(scope="session")
def qwen_server(daphne_server):
    """A Daphne of its own serving the Qwen file (`make test` fetches it: tests/support/real_gguf.py),
    started by the first test that asks and kept for the session: a shared one would take one of the
    two shared places and could stop the session's default server. A small KV pool and four slots:
    agent turns are a few hundred tokens."""
    server = daphne_server.fresh(
        MINIVLLM_MODEL=str(real_gguf.QWEN25_CODER.file_or_skip()), MINIVLLM_KV_CACHE_MB="128", MINIVLLM_MAX_NUM_SEQS="4"
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gemma3_server(daphne_server):
    """A Daphne of its own serving the real Gemma 3 270M file, for its live tests and the numerics test."""
    server = daphne_server.fresh(MINIVLLM_MODEL=str(real_gguf.GEMMA3.file_or_skip()))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def qwen_model(qwen_server) -> str:
    import httpx

    return httpx.get(f"{qwen_server.url}/v1/models", timeout=30).json()["data"][0]["id"]
