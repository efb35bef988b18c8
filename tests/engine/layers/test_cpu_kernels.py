"""Each layer asks "can our kernels run here" once, at load, and keeps the answer."""

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.layers import cpu_kernels
from inference.engine.layers.attention import choose_decode_attention
from inference.engine.layers.attention.decode_gathered import GatheredDecode
from inference.engine.layers.attention.decode_kernels import KernelDecode
from inference.engine.layers.attention.decode_triton import TritonDecode, triton_available
from inference.engine.layers.norm import RMSNorm
from inference.engine.layers.rotary import RopeTables, RotaryEmbedding, rotated
from inference.engine.loader import build_bundle
from tests.support.engine_helpers import engine_for, generated_ids, greedy, run_to_completion

CPU = torch.device("cpu")


def test_the_kernels_apply_to_float32_on_cpu_in_whole_vectors_only(cpp):
    assert cpu_kernels.cpu_kernels_for(CPU, torch.float32, 64, 576) is cpp
    assert cpu_kernels.cpu_kernels_for(CPU, torch.float32, 60) is None
    assert cpu_kernels.cpu_kernels_for(CPU, torch.bfloat16, 64) is None
    assert cpu_kernels.cpu_kernels_for(torch.device("cuda"), torch.float32, 64) is None
    assert choose_decode_attention(CPU, torch.float32, 64, torch.float16) == (KernelDecode, cpp)
    assert choose_decode_attention(CPU, torch.float32, 64, torch.bfloat16) == (GatheredDecode, None)
    assert choose_decode_attention(CPU, torch.bfloat16, 64, torch.bfloat16) == (GatheredDecode, None)
    cuda = torch.device("cuda")
    if triton_available():  # CUDA reads blocks in place by Triton where its block loads can (a power-of-two block)
        assert choose_decode_attention(cuda, torch.bfloat16, 64, torch.bfloat16) == (TritonDecode, None)
    assert choose_decode_attention(cuda, torch.bfloat16, 64, torch.bfloat16, block_size=24) == (GatheredDecode, None)


@pytest.mark.usefixtures("needs_cpu_kernels")  # the layers bind the kernels at load
def test_a_loaded_model_never_asks_again(tiny_hf, smollm_tokenizer, monkeypatch):
    engine = engine_for(tiny_hf, smollm_tokenizer)
    norms = [m for m in engine.bundle.model.modules() if isinstance(m, RMSNorm)]
    assert norms and all(norm._cpp is not None for norm in norms)
    expected = generated_ids(_run(engine))

    def asked(*args):
        raise AssertionError("a layer asked for the kernels after load")

    monkeypatch.setattr(cpu_kernels, "kernels", asked)
    assert generated_ids(_run(engine)) == expected


def test_a_bf16_model_binds_no_kernels(tiny_hf, smollm_tokenizer):
    config = EngineConfig(dtype="bfloat16", device="cpu")
    model = build_bundle(tiny_hf.config, smollm_tokenizer, tiny_hf.state_dict(), name="tiny", config=config).model
    assert all(m._cpp is None for m in model.modules() if isinstance(m, (RMSNorm, RotaryEmbedding)))


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "torch"])
def test_rotation_is_in_place_on_both_paths(cpp, use_kernel):
    torch.manual_seed(0)
    qkv = torch.randn(5, 6, 16)
    rope = RotaryEmbedding(16, 32, {"rope_theta": 10000.0, "rope_type": "default"}).tables(torch.arange(5), torch.float32)
    tables = RopeTables(rope.cos, rope.sin, cpp if use_kernel else None)
    view = qkv[:, :4]
    expected = rotated(view, rope.cos, rope.sin)
    assert tables.rotate_(view) is view
    assert torch.equal(qkv[:, :4], expected)


def _run(engine):
    engine.add_request("r", engine.tokenize("bind once"), greedy(6))
    return run_to_completion(engine)["r"]
