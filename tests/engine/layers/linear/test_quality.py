"""The weight formats on the real model: greedy tokens agree with bf16 on >= 95% of teacher-forced
positions, the default (the GGUF's own 4-bit groups) with float32 on >= 99%, and batching changes no token."""

from __future__ import annotations

import pytest

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.layers.linear import bf16_weights_run_natively
from inference.engine.loader import build_bundle
from tests.support.engine_helpers import generated_ids, greedy, prefill_logits, run_to_completion

NEEDS_AVX512_BF16 = pytest.mark.skipif(not bf16_weights_run_natively(), reason="MINIVLLM_QUANT=bf16 needs AVX512-BF16")

PROMPTS = [
    "The future of AI inference is",
    "Once upon a time",
    "The best way to learn a language is",
    "def quicksort(arr):",
    "The history of Rome begins",
    "My favourite recipe for soup",
    "Explain gravity to a child:",
    "The stock market today",
    "A poem about autumn:",
    "The main causes of climate change are",
    "In the year 3000,",
    "How do vaccines work?",
    "The ocean is",
    "Dear hiring manager,",
    "Ten facts about cats:",
    "import numpy as np",
    "The meaning of life is",
    "Yesterday I went to the",
    "Photosynthesis is the process",
    "The rules of chess are",
]


def engine_with(
    real_hf_model, tokenizer, quantization: str, dtype: str | None = None, checkpoint: str | None = None
) -> LLMEngine:
    """bf16 for the reference; the formats as the server runs them: float32 activations, every kernel in its path."""
    dtype = dtype or ("bfloat16" if quantization == "none" else "float32")
    cfg = EngineConfig(dtype=dtype, device="cpu", quantization=quantization, kv_cache_mb=64, max_num_seqs=20)
    bundle = build_bundle(
        real_hf_model.config, tokenizer, real_hf_model.state_dict(), name="smollm2", config=cfg, checkpoint=checkpoint
    )
    return LLMEngine(cfg, bundle=bundle)


def teacher_forced_reference(reference: LLMEngine, tokens: int) -> list[tuple[list[int], slice, list[int]]]:
    """The reference's own greedy continuations: per prompt, its ids, the positions that predicted
    the generated tokens, and the reference's choices there."""
    for i, prompt in enumerate(PROMPTS):
        reference.add_request(str(i), reference.tokenize(prompt), greedy(tokens))
    results = run_to_completion(reference)
    cases = []
    for i, prompt in enumerate(PROMPTS):
        ids = reference.tokenize(prompt) + generated_ids(results[str(i)])
        positions = slice(len(ids) - tokens - 1, len(ids) - 1)  # the predictions of the generated tokens
        cases.append((ids, positions, greedy_choices(reference, ids)[positions]))
    return cases


def teacher_forced_agreement(cases, candidate: LLMEngine) -> tuple[int, int]:
    """Given the reference's own greedy continuations, how often the candidate picks the reference's next token."""
    agree = total = 0
    for ids, positions, expected in cases:
        chosen = greedy_choices(candidate, ids)[positions]
        agree += sum(a == b for a, b in zip(expected, chosen))
        total += len(expected)
    return agree, total


@pytest.fixture(scope="module")
def bf16_reference(real_hf_model, smollm_tokenizer):
    """bf16's greedy text and choices, made once for every format compared with it (bf16 is
    emulated, so slow, on CPUs without AVX512-BF16)."""
    return teacher_forced_reference(engine_with(real_hf_model, smollm_tokenizer, "none"), 16)


def needs_its_kernels(request, quantization: str) -> None:
    """Every format here but bf16 (oneDNN) runs on our CPU kernels: without them (MINIVLLM_CPU_KERNELS=0) its test skips."""
    if quantization != "bf16":
        request.getfixturevalue("needs_cpu_kernels")


def greedy_choices(engine: LLMEngine, token_ids: list[int]) -> list[int]:
    """The argmax at every position of one prefill through the engine's own model and cache."""
    return prefill_logits(engine, token_ids, fused=False).argmax(dim=-1).tolist()


@pytest.mark.parametrize("quantization", ["int8", "int4", "q8_0", pytest.param("bf16", marks=NEEDS_AVX512_BF16)])
def test_quantized_greedy_agrees_with_bf16_on_real_model(request, real_hf_model, smollm_tokenizer, bf16_reference, quantization):
    """Per position, teacher-forced: given bf16's own greedy text, does the quantized model pick bf16's next token?

    Free-running agreement would count every token after a first near-tie flip as a miss
    (bf16 itself agrees with float32 on under 80% of positions that way), so it measures the
    model's sensitivity, not the quantization's error.
    """
    needs_its_kernels(request, quantization)
    agree, total = teacher_forced_agreement(bf16_reference, engine_with(real_hf_model, smollm_tokenizer, quantization))
    assert total == 20 * 16
    assert agree / total >= 0.95, f"{quantization} agrees with bf16 on {agree}/{total} positions"


@pytest.mark.usefixtures("needs_cpu_kernels")  # the default format's GroupLinear
def test_the_default_format_agrees_with_float32_on_99_percent_of_positions(real_hf_model, smollm_tokenizer):
    """`auto` on the embedded Q4_1 GGUF (its own 4-bit groups, int8 activation groups, the Q8_0
    lm_head) against the float32 model of the same weights: 20 prompts x 64 teacher-forced positions."""
    default = engine_with(real_hf_model, smollm_tokenizer, "auto", checkpoint="q4_1")
    assert type(default.bundle.model.layers[0].mlp.gate_up_proj).__name__ == "GroupLinear"
    float32 = engine_with(real_hf_model, smollm_tokenizer, "none", dtype="float32")
    agree, total = teacher_forced_agreement(teacher_forced_reference(float32, 64), default)
    assert total == 20 * 64
    assert agree / total >= 0.99, f"the default format agrees with float32 on {agree}/{total} positions"


@pytest.mark.parametrize("quantization", ["int8", "int4", "q8_0", pytest.param("bf16", marks=NEEDS_AVX512_BF16)])
def test_quantized_batching_does_not_change_greedy_tokens(request, real_hf_model, smollm_tokenizer, quantization):
    """Alone or in a batch of 8 (with other requests' prefill chunks in its steps), the same tokens."""
    needs_its_kernels(request, quantization)
    cfg = EngineConfig(dtype="float32", device="cpu", quantization=quantization, kv_cache_mb=64, max_num_seqs=8)
    bundle = build_bundle(real_hf_model.config, smollm_tokenizer, real_hf_model.state_dict(), name="smollm2", config=cfg)
    engine = LLMEngine(cfg, bundle=bundle)
    prompts = PROMPTS[:8]
    alone = []
    for i, prompt in enumerate(prompts):
        engine.add_request(f"alone-{i}", engine.tokenize(prompt), greedy(12))
        alone.append(generated_ids(run_to_completion(engine)[f"alone-{i}"]))
    for i, prompt in enumerate(prompts):
        engine.add_request(f"batch-{i}", engine.tokenize(prompt), greedy(12))
    together = run_to_completion(engine)
    assert [generated_ids(together[f"batch-{i}"]) for i in range(len(prompts))] == alone
