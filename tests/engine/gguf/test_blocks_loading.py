"""GGUF files of k-quant mixes read in place: each linear keeps its tensor's type (a fused Q/K/V of
Q4_K and Q6_K too), the model computes what transformers' float32 de-quantized model computes,
for Llama (tied and untied, Llama 3 rope factors), Qwen2 (biases), Qwen3 (Q/K norms), Gemma 3
(a sliding window shorter than the prompt, four norms a layer, shifted as llama.cpp writes them),
Phi-3 (fused Q/K/V and gate/up tensors, partial rotary, LongRoPE factor tensors) and SmolLM3 (no
RoPE on every fourth layer); a file
of an architecture we do not run, or a truncated one, gets a clear error."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.errors import UnsupportedModelError
from inference.engine.gguf import checkpoint as gguf_checkpoint
from inference.engine.layers.experts import ExpertLinear, ExpertParts
from inference.engine.layers.linear.blocks import BlockLinear, FileEmbedding, FloatLinear, PartsLinear
from inference.engine.loader import ModelLoadError, load_model
from tests.support.engine_helpers import prefill_logits
from tests.support.gguf_files import write_block_gguf
from tests.support.gguf_reference import reference_model

pytestmark = pytest.mark.real_model  # the embedded GGUF's tokenizer, parsed by transformers


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_checkpoint, "CACHE_ROOT", tmp_path / "cache")


def hf_logits(path: str, ids: torch.Tensor, read_by_transformers: bool = False) -> torch.Tensor:
    """transformers' float32 model of the file's de-quantized weights: its class over our de-quantized
    tensors (tests/support/gguf_reference.py; the config is our reader's), or, with
    `read_by_transformers`, the file read by transformers itself (gguf-py de-quantizing in Python,
    ~3 s a file more). transformers ignores a Llama 3 file's
    `rope_freqs`; the reference divides its frequencies by them, as llama.cpp does."""
    from transformers import AutoModelForCausalLM

    checkpoint = gguf_checkpoint.GGUFCheckpoint.open(path)
    if not read_by_transformers:
        with torch.no_grad():
            return reference_model(path)(ids[None]).logits[0]
    folder, name = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    if "rope_freqs.weight" in checkpoint.tensors:
        rotary = model.model.rotary_emb
        rotary.inv_freq = rotary.inv_freq / checkpoint.float_tensor("rope_freqs.weight")
    with torch.no_grad():
        return model(ids[None]).logits[0]


def row_errors(ours: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Each position's relative error. The activations go in as int8 per block (llama.cpp's scheme),
    ~1-5% a position on these random models, more where one outlier sets a block's scale; a tensor
    read in the wrong layout is off by ~100% everywhere."""
    return (ours - reference).norm(dim=-1) / reference.norm(dim=-1)


# transformers reads these files itself: a case of each family it reads whole (so our reader's config
# of it is held to transformers' own reading) and the IQ4 types our torch de-quantizer does not have
READ_BY_TRANSFORMERS = (
    "llama q4_k_m tied",
    "llama untied, llama3 rope factors",
    "qwen2 biases",
    "qwen3 norms",
    "every block type",
)
CASES = {  # name: (arch, write_block_gguf's keywords)
    "llama q4_k_m tied": ("llama", {}),
    "llama untied, llama3 rope factors": ("llama", {"tied": False, "rope_freqs": True}),
    "qwen2 biases": ("qwen2", {}),
    "qwen3 norms": ("qwen3", {}),
    "gemma3 window, four norms": ("gemma3", {}),
    "phi3 fused tensors, partial rotary, longrope factors": ("phi3", {}),
    "smollm3 no rope every fourth layer": ("smollm3", {}),
    "qwen3moe experts, q4_k gate/up and q6_k down": ("qwen3moe", {}),
    "mixtral: a llama file with experts": ("mixtral", {}),
    "olmoe norms over whole projections": ("olmoe", {}),
    "experts whose gate and up differ in type": ("qwen3moe", {"types": {"ffn_up_exps": "q5_k"}}),
    "float16 experts": ("qwen3moe", {"types": {"ffn_gate_exps": "f16", "ffn_up_exps": "f16", "ffn_down_exps": "f16"}}),
    "every block type": (
        "llama",
        {
            "types": {
                "attn_q": "q5_k",
                "attn_k": "q3_k",
                "attn_output": "iq4_xs",
                "ffn_gate": "q2_k",
                "ffn_up": "q5_1",
                "ffn_down": "iq4_nl",
                "attn_v": "q5_0",
                "token_embd": "q4_k",
            }
        },
    ),
    "group and block types in one fused projection": ("llama", {"types": {"attn_v": "q8_0", "ffn_up": "q4_0"}}),
    "float16 matrices": (
        "llama",
        {"types": {k: "f16" for k in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up")}},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_model_computes_what_transformers_dequantized_model_computes(tmp_path, case, caplog):
    arch, options = CASES[case]
    path = write_block_gguf(tmp_path / "model.gguf", arch, **options)
    with caplog.at_level(logging.INFO, logger="minivllm.engine"):
        bundle = load_model(EngineConfig(model=path, device="cpu"))
    assert bundle.weights_format == "gguf" and "tensors per type and kernel" in caplog.text
    assert isinstance(bundle.model.embed_tokens, FileEmbedding)
    assert not any(isinstance(m, torch.nn.Linear) for m in bundle.model.modules())  # every linear reads the file's blocks
    engine = LLMEngine(EngineConfig(model=path, device="cpu", num_kv_blocks=16), bundle=bundle)
    ids = torch.tensor(engine.tokenize("The quick brown fox jumps over the lazy dog, twice"))
    errors = row_errors(prefill_logits(engine, ids), hf_logits(path, ids, case in READ_BY_TRANSFORMERS))
    assert errors.median() < 0.1 and errors.mean() < 0.25, errors


def test_a_file_we_cannot_read_in_place_falls_back_to_float32_weights(tmp_path):
    """A bfloat16 model (or a family without a GGUF layout) takes transformers' de-quantized weights,
    and `auto` keeps them as they come instead of asking for the file's blocks again."""
    bundle = load_model(EngineConfig(model=write_block_gguf(tmp_path / "m.gguf"), device="cpu", dtype="bfloat16"))
    assert bundle.weights_format == "none" and bundle.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="MINIVLLM_QUANT=gguf"):
        load_model(EngineConfig(model=str(tmp_path / "m.gguf"), device="cpu", dtype="bfloat16", quantization="gguf"))


def test_each_linear_keeps_its_own_tensor_type(tmp_path):
    bundle = load_model(EngineConfig(model=write_block_gguf(tmp_path / "m.gguf"), device="cpu"))
    layer = bundle.model.layers[0]
    qkv = layer.self_attn.qkv_proj
    assert isinstance(qkv, PartsLinear) and [p.kind for p in qkv.parts] == ["q4_k", "q6_k"]  # Q and K packed as one
    assert [p.out_features for p in qkv.parts] == [256 + 128, 128]  # Q and K, then V
    assert isinstance(layer.mlp.gate_up_proj, BlockLinear) and layer.mlp.gate_up_proj.kind == "q4_k"
    assert layer.mlp.down_proj.kind == "q6_k" and bundle.model.lm_head.kind == "q6_k"
    packed = sum(m.packed.nbytes for m in bundle.model.modules() if isinstance(m, BlockLinear))
    in_file = sum(
        e.nbytes
        for n, e in gguf_checkpoint.GGUFCheckpoint.open(str(tmp_path / "m.gguf")).tensors.items()
        if n != "token_embd.weight"
    )
    assert packed <= 1.05 * (in_file + bundle.model.embed_tokens.raw.nbytes)  # the tied output is packed once


def test_experts_run_from_the_files_blocks_packed_once_per_layer(tmp_path):
    """A Q4_K_M-style MoE file: each sparse layer's gate and up experts packed as one weight, its
    down experts as another, in the file's own types, about the file's own size; the router a
    float linear; a gate and up of different types kept apart; the model named as a MoE."""
    bundle = load_model(EngineConfig(model=write_block_gguf(tmp_path / "m.gguf", "qwen3moe"), device="cpu"))
    experts = bundle.model.layers[1].mlp.experts
    assert isinstance(experts.gate_up, ExpertLinear) and experts.gate_up.kind == "q4_k" and experts.down.kind == "q6_k"
    assert experts.gate_up.packed.shape[:2] == (8, 2 * 256 // 16) and experts.down.packed.shape[:2] == (8, 256 // 16)
    assert isinstance(bundle.model.layers[1].mlp.gate, FloatLinear)
    assert "MoE, 2 of 8 experts" in bundle.attention_layout
    in_file = sum(
        e.nbytes for n, e in gguf_checkpoint.GGUFCheckpoint.open(str(tmp_path / "m.gguf")).tensors.items() if "_exps" in n
    )
    packed = sum(m.packed.nbytes for m in bundle.model.modules() if isinstance(m, ExpertLinear))
    assert in_file <= packed <= 1.05 * in_file
    mixed = load_model(
        EngineConfig(model=write_block_gguf(tmp_path / "x.gguf", "qwen3moe", types={"ffn_up_exps": "q5_k"}), device="cpu")
    )
    gate_up = mixed.model.layers[0].mlp.experts.gate_up
    assert isinstance(gate_up, ExpertParts) and [p.kind for p in gate_up.parts] == ["q4_k", "q5_k"]


def test_a_file_with_one_tensor_per_expert_is_refused_with_a_clear_line(tmp_path):
    """Older Mixtral conversions wrote blk.N.ffn_gate.E.weight per expert; llama.cpp reads only 3-D experts now."""
    from gguf import GGUFReader, GGUFWriter

    path = write_block_gguf(tmp_path / "new.gguf", "mixtral")
    reader = GGUFReader(path)
    writer = GGUFWriter(str(tmp_path / "old.gguf"), "llama")
    for key, field in reader.fields.items():
        if not key.startswith(("GGUF.", "general.architecture")):
            writer.add_key_value(key, field.contents(), field.types[0], field.types[1] if len(field.types) > 1 else None)
    for tensor in reader.tensors:
        if "_exps" in tensor.name:
            for e in range(tensor.data.shape[0]):
                name = tensor.name.replace("_exps.weight", f".{e}.weight")
                writer.add_tensor(name, tensor.data[e], raw_shape=tensor.data[e].shape, raw_dtype=tensor.tensor_type)
        else:
            writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="one tensor each.*convert the model again"):
        load_model(EngineConfig(model=str(tmp_path / "old.gguf"), device="cpu"))


def test_an_architecture_we_do_not_run_is_named_at_load(tmp_path):
    path = write_block_gguf(tmp_path / "m.gguf", "falcon")  # transformers reads its config; we run no Falcon
    with pytest.raises(UnsupportedModelError, match="falcon"):
        load_model(EngineConfig(model=path, device="cpu"))


def test_a_truncated_file_is_a_clear_error(tmp_path):
    path = write_block_gguf(tmp_path / "m.gguf")
    data = open(path, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="cut.gguf"):
        load_model(EngineConfig(model=str(cut), device="cpu"))


@pytest.mark.parametrize("types", [{}, {"attn_q": "f16", "ffn_up": "bf16"}], ids=["q4_k_m", "16-bit"])
def test_no_float32_copy_of_a_weight_stays_referenced(tmp_path, types):
    from tests.engine.gguf.test_weights import large_float32_tensors

    path = write_block_gguf(tmp_path / "m.gguf", types=types)
    smallest_matrix = 128 * 256  # K/V's rows times the hidden size
    before = large_float32_tensors(smallest_matrix)
    bundle = load_model(EngineConfig(model=path, device="cpu"))
    rotary = {bundle.model.rotary.cos.data_ptr(), bundle.model.rotary.sin.data_ptr()}
    new = {ptr: shape for ptr, shape in large_float32_tensors(smallest_matrix).items() if ptr not in before and ptr not in rotary}
    assert not new, list(new.values())


@pytest.mark.parametrize(
    "arch, layout",
    [
        ("gemma3", "gemma3_text, sliding window 8 ×5/6"),
        ("phi3", "phi3, full attention, RoPE on 48 of 64 dimensions, LongRoPE (long factors)"),
        ("smollm3", "smollm3, full attention, no RoPE on 1 of 4 layers"),
    ],
)
def test_each_familys_attention_layout_is_read_from_its_file(tmp_path, arch, layout):
    """What the file's metadata says of the attention reaches the model (and the dashboard's label)."""
    path = write_block_gguf(tmp_path / "m.gguf", arch)
    engine = LLMEngine(EngineConfig(model=path, device="cpu", num_kv_blocks=16))
    assert engine.architecture == layout


def test_a_longrope_file_read_through_transformers_still_gets_its_factors(tmp_path):
    """bfloat16 takes transformers' de-quantized weights, whose reader leaves the factor tensors out."""
    path = write_block_gguf(tmp_path / "m.gguf", "phi3")
    in_place = load_model(EngineConfig(model=path, device="cpu"))
    fallback = load_model(EngineConfig(model=path, device="cpu", dtype="bfloat16"))
    assert fallback.weights_format == "none" and fallback.dtype == torch.bfloat16
    assert torch.equal(fallback.model.rotary.cos, in_place.model.rotary.cos)
