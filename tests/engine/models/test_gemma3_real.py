"""The real Gemma 3 270M Q4_K_M file (llama.cpp's own conversion, fetched by `make test`) read in
place through our kernels: teacher-forced greedy tokens agree with transformers' Gemma3ForCausalLM
in float32 over the same de-quantized weights, on prompts longer than the 512-token window too.

The reference is transformers' class over our de-quantized tensors (tests/support/gguf_reference.py),
because transformers' own GGUF loading parses the 262k-token vocabulary with gguf-py for ~20 s. Agreement
with llama-server on the same file is in tests/api/test_gemma3_live.py, where llama.cpp is built.
"""

from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from tests.support import real_gguf
from tests.support.engine_helpers import prefill_logits

pytestmark = pytest.mark.real_model

TEXTS = [
    "The lighthouse keeper climbed the stairs every evening to light the lamp. One night, a storm",
    "def merge_sort(values):\n    if len(values) <= 1:\n        return values\n",
    "Photosynthesis is the process by which green plants use sunlight to",
    "The history of the Roman Empire spans more than a thousand years, from",
]


@pytest.fixture(scope="module")
def engine():
    return LLMEngine(EngineConfig(model=str(real_gguf.file_or_skip()), device="cpu", kv_cache_mb=64, max_num_seqs=2))


@pytest.fixture
def reference(engine, gemma3_reference):
    return gemma3_reference


def test_the_file_runs_as_gemma3_in_its_own_blocks(engine):
    assert engine.architecture == "gemma3_text, sliding window 512 ×15/18"
    assert engine.weights.startswith("GGUF blocks: Q4_K ×27, Q5_0 ×81, Q6_K ×9, Q8_0 ×10")


def test_teacher_forced_greedy_tokens_agree_with_transformers(engine, reference):
    """Our activations go in as int8 blocks (llama.cpp's scheme): near-ties may flip, not 1 in 20."""
    agree = total = 0
    long_text = " ".join(TEXTS * 20)  # ~700 tokens: the window slides past the prompt's start
    for text, last in [*((t, 0) for t in TEXTS), (long_text, 200)]:
        ids = engine.tokenize(text)
        assert last == 0 or len(ids) > 512 + last
        with torch.no_grad():
            expected = reference(torch.tensor([ids]), logits_to_keep=last).logits[0].argmax(-1)
        ours = prefill_logits(engine, ids, last=last).argmax(-1)
        agree += int((ours == expected).sum())
        total += len(ours)
    assert total > 250 and agree / total >= 0.95, f"{agree} of {total} positions agree"


def test_a_reply_past_the_window_through_the_engine_agrees_with_transformers(engine, reference):
    """The engine's own path over the sliding-window pool: a ~700-token prompt prefilled in two
    chunks (the second reading the window's blocks only), then decodes; each generated token is
    transformers' argmax at its position (teacher-forced over the reply), near-ties aside."""
    from tests.support.engine_helpers import generated_ids, greedy, run_to_completion

    ids = engine.tokenize(" ".join(TEXTS * 20))
    assert len(ids) > max(engine.config.max_num_batched_tokens, 512)  # two chunks, the second past the window
    engine.add_request("long", ids, greedy(16))
    reply = generated_ids(run_to_completion(engine)["long"])
    with torch.no_grad():
        expected = reference(torch.tensor([ids + reply]), logits_to_keep=len(reply) + 1).logits[0, :-1].argmax(-1)
    agree = sum(int(a == b) for a, b in zip(reply, expected.tolist()))
    assert agree >= 14, f"{agree} of 16 generated tokens are transformers' argmax"
    assert engine.kv_cache.window.pool.num_free == engine.kv_cache.window.pool.num_blocks
