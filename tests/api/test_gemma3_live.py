"""The real Gemma 3 270M Q4_K_M file served end to end by a live Daphne, as a user points
MINIVLLM_MODEL at it: /v1/models says what runs, completions answer, chat (the base file has no
template) is a 400 saying why. Its numerics against float32 and llama-server, teacher-forced, are
in tests/api/test_numerics_live.py (free-running replies part for good at the first near-tie, so
they judge nothing)."""

from __future__ import annotations

import httpx
import pytest

pytestmark = [pytest.mark.live, pytest.mark.real_model]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
    "Water boils at a temperature of",
]
MAX_TOKENS = 24


@pytest.fixture
def server(gemma3_server):
    return gemma3_server


def greedy_texts(base_url: str) -> list[str]:
    with httpx.Client(base_url=base_url, timeout=120) as client:
        replies = [
            client.post("/v1/completions", json={"prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0}) for p in PROMPTS
        ]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    return [r.json()["choices"][0]["text"] for r in replies]


def test_the_file_is_served_as_what_runs_and_chat_says_it_has_no_template(server):
    [model] = httpx.get(f"{server.url}/v1/models").json()["data"]
    assert model["architecture"] == "gemma3_text, sliding window 512 ×15/18"
    assert model["weights"] == "GGUF blocks: Q4_K ×27, Q5_0 ×81, Q6_K ×9, Q8_0 ×10; KV float16"
    assert "France" in greedy_texts(server.url)[0]  # the 270M base model: " the capital of the country of France. ..."
    chat = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]})
    assert chat.status_code == 400 and "no chat template" in chat.json()["error"]["message"]
