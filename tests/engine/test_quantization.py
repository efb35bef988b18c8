"""Weight-only int8 (and the int4, bf16 modes): close to the float weights, and greedy tokens agree with bf16 on >= 95% of positions."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.attention import AttentionMetadata, PrefillChunk
from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.loader import build_bundle
from inference.engine.quantization import Int8Linear, bf16_weights_run_natively, quantize_int8
from tests.engine.helpers import generated_ids, greedy, run_to_completion

NEEDS_AVX512_BF16 = pytest.mark.skipif(not bf16_weights_run_natively(), reason="MINIVLLM_QUANT=bf16 needs AVX512-BF16")

PROMPTS = [
    "The future of AI inference is", "Once upon a time", "The best way to learn a language is",
    "def quicksort(arr):", "The history of Rome begins", "My favourite recipe for soup",
    "Explain gravity to a child:", "The stock market today", "A poem about autumn:",
    "The main causes of climate change are", "In the year 3000,", "How do vaccines work?",
    "The ocean is", "Dear hiring manager,", "Ten facts about cats:", "import numpy as np",
    "The meaning of life is", "Yesterday I went to the", "Photosynthesis is the process",
    "The rules of chess are",
]


def test_int8_linear_matches_float_within_quantization_error():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32, bias=True)
    x = torch.randn(4, 64)
    quantized = Int8Linear(linear)
    assert quantized.packed_int8_0.dtype == torch.int8
    error = (quantized(x) - linear(x)).abs().max()
    assert 0 < error < 0.02 * linear(x).abs().max()  # int8 path: close, not identical
    assert quantized(x).dtype == torch.float32  # the model's dtype, whatever the kernel's


@pytest.mark.parametrize("two_level", [False, True])
def test_int8_kernel_rows_do_not_depend_on_the_batch(two_level):
    """What makes an int8 decode batch-invariant: each row's result is exact, alone or in a batch."""
    torch.manual_seed(0)
    quantized = Int8Linear(nn.Linear(256, 128), two_level=two_level)
    x = torch.randn(32, 256)
    assert torch.equal(torch.cat([quantized(row[None]) for row in x]), quantized(x))


def dequantized(layer: Int8Linear) -> torch.Tensor:
    """The weight the layer multiplies by: one-hot rows round to int16 exactly, so layer(I) is W.T."""
    return layer(torch.eye(layer.in_features)).T


def test_second_int8_level_shrinks_the_weight_error_a_hundredfold():
    torch.manual_seed(0)
    linear = nn.Linear(256, 128, bias=False)
    errors = [(dequantized(Int8Linear(linear, two_level=two)) - linear.weight).abs().max().item() for two in (False, True)]
    assert errors[1] < errors[0] / 100


def test_quantize_replaces_every_linear_and_gives_qkv_two_levels():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    model.qkv_proj = nn.Linear(8, 8)
    model.lm_head = nn.Linear(8, 16)
    quantize_int8(model)
    assert [type(m).__name__ for m in (model[0], model[2][0], model.qkv_proj)] == ["Int8Linear"] * 3
    assert [m.levels for m in (model[0], model.qkv_proj, model.lm_head)] == [1, 2, 1]


def test_bf16_weights_are_refused_where_they_mean_nothing_or_run_slowly(monkeypatch):
    from inference.engine import quantization

    with pytest.raises(ValueError, match="MINIVLLM_DTYPE=bfloat16"):
        quantization.apply_quantization(nn.Sequential(nn.Linear(8, 8)).bfloat16(), "bf16", torch.device("cpu"))
    monkeypatch.setattr(quantization, "cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ValueError, match="AVX512-BF16"):
        quantization.apply_quantization(nn.Sequential(nn.Linear(8, 8)), "bf16", torch.device("cpu"))


def test_a_linear_the_kernel_cannot_take_is_refused_at_load():
    with pytest.raises(ValueError, match="multiple of 8"):
        quantize_int8(nn.Sequential(nn.Linear(12, 4)))


def engine_with(real_hf_model, tokenizer, quantization: str) -> LLMEngine:
    """bf16 for the reference; int8 as the server runs it without AMX: float32 activations, every kernel in its path."""
    dtype = "bfloat16" if quantization == "none" else "float32"
    cfg = EngineConfig(dtype=dtype, device="cpu", quantization=quantization, kv_cache_mb=64, max_num_seqs=20)
    bundle = build_bundle(real_hf_model.config, tokenizer, real_hf_model.state_dict(), name="smollm2", config=cfg)
    return LLMEngine(cfg, bundle=bundle)


def greedy_choices(engine: LLMEngine, token_ids: list[int]) -> list[int]:
    """The argmax at every position of one prefill through the engine's own model and cache."""
    n = len(token_ids)
    meta = AttentionMetadata(
        write_rows=engine.runner.head_slot_offsets.add(torch.arange(n)).reshape(-1), num_decodes=0,
        decode_block_rows=None, decode_padding=None,
        prefills=[PrefillChunk(start=0, end=n, context_len=n, block_rows=None, causal_mask=None)],
    )
    model = engine.bundle.model
    with torch.inference_mode():
        hidden = model(torch.tensor(token_ids), torch.arange(n), engine.runner.kv_caches, meta)
        return model.compute_logits(hidden).argmax(dim=-1).tolist()


@pytest.mark.parametrize("quantization", ["int8", "int4", pytest.param("bf16", marks=NEEDS_AVX512_BF16)])
def test_quantized_greedy_agrees_with_bf16_on_real_model(real_hf_model, smollm_tokenizer, quantization):
    """Per position, teacher-forced: given bf16's own greedy text, does the quantized model pick bf16's next token?

    Free-running agreement would count every token after a first near-tie flip as a miss
    (bf16 itself agrees with float32 on under 80% of positions that way), so it measures the
    model's sensitivity, not the quantization's error.
    """
    bf16 = engine_with(real_hf_model, smollm_tokenizer, "none")
    for i, prompt in enumerate(PROMPTS):
        bf16.add_request(str(i), prompt, greedy(16))
    results = run_to_completion(bf16)
    texts = [bf16.tokenize(p) + generated_ids(results[str(i)]) for i, p in enumerate(PROMPTS)]
    quantized = engine_with(real_hf_model, smollm_tokenizer, quantization)
    agree = total = 0
    for ids in texts:
        positions = slice(len(ids) - 17, len(ids) - 1)  # the 16 predictions of the generated tokens
        reference, chosen = greedy_choices(bf16, ids)[positions], greedy_choices(quantized, ids)[positions]
        agree += sum(a == b for a, b in zip(reference, chosen))
        total += len(reference)
    assert total == 20 * 16
    assert agree / total >= 0.95, f"{quantization} agrees with bf16 on {agree}/{total} positions"


@pytest.mark.parametrize("quantization", ["int8", "int4", pytest.param("bf16", marks=NEEDS_AVX512_BF16)])
def test_quantized_batching_does_not_change_greedy_tokens(real_hf_model, smollm_tokenizer, quantization):
    """Alone or in a batch of 8 (with other requests' prefill chunks in its steps), the same tokens."""
    cfg = EngineConfig(dtype="float32", device="cpu", quantization=quantization, kv_cache_mb=64, max_num_seqs=8)
    bundle = build_bundle(real_hf_model.config, smollm_tokenizer, real_hf_model.state_dict(), name="smollm2", config=cfg)
    engine = LLMEngine(cfg, bundle=bundle)
    prompts = PROMPTS[:8]
    alone = []
    for i, prompt in enumerate(prompts):
        engine.add_request(f"alone-{i}", prompt, greedy(12))
        alone.append(generated_ids(run_to_completion(engine)[f"alone-{i}"]))
    for i, prompt in enumerate(prompts):
        engine.add_request(f"batch-{i}", prompt, greedy(12))
    together = run_to_completion(engine)
    assert [generated_ids(together[f"batch-{i}"]) for i in range(len(prompts))] == alone
