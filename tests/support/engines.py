"""The in-process engine that structured-output and tool-call tests run many requests through
(tests/engine/sample/test_structured.py, tests/api/test_tool_parsers.py). A pytest plugin: tests/conftest.py
registers it, so tests/engine and tests/api get the same fixture."""

from __future__ import annotations

import pytest

from tests.support.engine_helpers import engine_for


@pytest.fixture(scope="module")
def engine(tiny_hf, smollm_tokenizer):
    """The tiny random Llama with a 512-block KV pool (room for many grammar-constrained rows),
    one per test module: the module's tests share it, each running its requests to completion."""
    return engine_for(tiny_hf, smollm_tokenizer, num_kv_blocks=512)
