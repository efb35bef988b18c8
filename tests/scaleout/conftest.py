"""The scale-out deployment the live tests share (one per test run: its start is ~40 s on two
cores): two `runengine` workers and two Daphne web workers on real Redis and PostgreSQL.
test_scaleout.py runs first and stops both engines by its end; test_scaleout_resume.py starts
engines of its own on the same web workers."""

from __future__ import annotations

import pytest

from tests.conftest import _save_tiny, tiny_llama_hf

from .cluster import Cluster


@pytest.fixture(scope="package")
def long_context_llama_dir(tmp_path_factory, smollm_tokenizer):
    """The tiny random Llama with room for LONG (the session's has a 512-token context)."""
    return _save_tiny(tmp_path_factory, smollm_tokenizer, "tiny-llama-8k", tiny_llama_hf(max_position_embeddings=8192))


@pytest.fixture(scope="package")
def cluster(long_context_llama_dir, tmp_path_factory):
    cluster = Cluster(long_context_llama_dir, tmp_path_factory.mktemp("scaleout")).prepare()
    try:
        cluster.start_engine("engine-a")
        cluster.start_engine("engine-b")
        cluster.start_web()
        cluster.start_web()
        cluster.wait_ready(engines=2)
        yield cluster
    finally:
        cluster.stop()
