"""Tiny llama GGUF files written in the tests: random weights in the block type asked for, and the
embedded model's own tokenizer and chat template (so transformers reads them as it reads the real one)."""

from __future__ import annotations

import functools

import numpy as np

from inference.engine.loader import embedded_model_source

HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, VOCAB = 64, 128, 2, 4, 2, 49152


@functools.cache
def embedded_fields() -> list[tuple[str, object, object, object]]:
    """The embedded GGUF's tokenizer and general fields: (key, value, type, element type)."""
    from gguf import GGUFReader

    source = embedded_model_source()
    reader = GGUFReader(f"{source.path}/{source.gguf_file}")
    fields = []
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "llama.", "general.architecture", "general.file_type")):
            continue
        element = field.types[1] if len(field.types) > 1 else None
        fields.append((key, field.contents(), field.types[0], element))
    return fields


def write_tiny_gguf(path, kind: str = "q4_1", *, embedding: str = "q8_0", tied: bool = True, seed: int = 0) -> str:
    """A 2-layer llama GGUF: every matrix in `kind` ("q4_0", "q4_1", "q8_0", "f16", "f32"), the
    token embedding in `embedding`, and an output.weight of its own unless `tied`."""
    from gguf import GGMLQuantizationType, GGUFWriter, quants

    types = {name.lower(): getattr(GGMLQuantizationType, name) for name in ("Q4_0", "Q4_1", "Q8_0", "F16", "F32")}
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "llama")
    for key, value, vtype, element in embedded_fields():
        writer.add_key_value(key, value, vtype, element)
    head_dim = HIDDEN // HEADS
    for key, value in [
        ("block_count", LAYERS),
        ("context_length", 512),
        ("embedding_length", HIDDEN),
        ("feed_forward_length", INTERMEDIATE),
        ("attention.head_count", HEADS),
        ("attention.head_count_kv", KV_HEADS),
        ("vocab_size", VOCAB),
        ("rope.dimension_count", head_dim),
    ]:
        writer.add_uint32(f"llama.{key}", value)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)

    def matrix(name: str, rows: int, columns: int, qtype: str) -> None:
        values = rng.normal(0.0, 0.08, size=(rows, columns)).astype(np.float32)
        if qtype in ("f16", "f32"):
            writer.add_tensor(name, values.astype(np.float16 if qtype == "f16" else np.float32))
        else:
            writer.add_tensor(name, quants.quantize(values, types[qtype]), raw_dtype=types[qtype])

    def norm(name: str) -> None:
        writer.add_tensor(name, (1.0 + rng.normal(0.0, 0.1, size=HIDDEN)).astype(np.float32))

    matrix("token_embd.weight", VOCAB, HIDDEN, embedding)
    for i in range(LAYERS):
        blk = f"blk.{i}."
        norm(blk + "attn_norm.weight")
        norm(blk + "ffn_norm.weight")
        matrix(blk + "attn_q.weight", HIDDEN, HIDDEN, kind)
        matrix(blk + "attn_k.weight", KV_HEADS * head_dim, HIDDEN, kind)
        matrix(blk + "attn_v.weight", KV_HEADS * head_dim, HIDDEN, kind)
        matrix(blk + "attn_output.weight", HIDDEN, HIDDEN, kind)
        matrix(blk + "ffn_gate.weight", INTERMEDIATE, HIDDEN, kind)
        matrix(blk + "ffn_up.weight", INTERMEDIATE, HIDDEN, kind)
        matrix(blk + "ffn_down.weight", HIDDEN, INTERMEDIATE, kind)
    norm("output_norm.weight")
    if not tied:
        matrix("output.weight", VOCAB, HIDDEN, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


MOE_ARCHS = ("qwen3moe", "olmoe", "mixtral")  # "mixtral": a `llama` file with experts, as llama.cpp writes Mixtral
EXPERTS, EXPERTS_USED = 8, 2


def write_block_gguf(
    path, arch: str = "llama", *, types: dict[str, str] | None = None, tied: bool = True, rope_freqs: bool = False, seed: int = 0
) -> str:
    """A 2-layer GGUF of `arch` ("llama", "qwen2": Q/K/V biases, "qwen3": Q/K norms; "gemma3": Q/K
    norms, four norms a layer, heads 256 wide, 6 layers: 5 with a sliding window of 8, then a global one;
    "phi3": fused attn_qkv and gate/up in ffn_up, RoPE on 48 of 64 dimensions, LongRoPE factors with an
    original context of 128; "smollm3": Llama's tensors, 4 layers, the fourth without RoPE; the
    mixtures of experts "qwen3moe" (Q/K norms per head), "olmoe" (Q/K norms over the whole projection)
    and "mixtral" (a `llama` file with experts): 8 experts of 256, 2 a token, as 3-D `ffn_*_exps`
    tensors and an F32 router `ffn_gate_inp`) 256 wide, every
    matrix random blocks of its role's type (`types`: "attn_q", "attn_k", "attn_v", "attn_output",
    "ffn_gate", "ffn_up", "ffn_down", "token_embd", "output"; default q4_k, and q6_k for attn_v,
    ffn_down and the embedding, as a Q4_K_M mix), scaled to weights of about 0.05; `rope_freqs`:
    Llama 3's per-frequency rope factors."""
    from gguf import GGMLQuantizationType, GGUFWriter

    from tests.support.gguf_blocks import dequantized, random_blocks

    kinds = {
        "attn_v": "q6_k",
        "ffn_down": "q6_k",
        "ffn_down_exps": "q6_k",
        "token_embd": "q6_k",
        "output": "q6_k",
        **(types or {}),
    }
    hidden, intermediate = 256, 512
    moe = arch in MOE_ARCHS
    # Qwen3's heads are 128 wide (transformers assumes it)
    heads, kv_heads = (2, 1) if arch in ("qwen3", "gemma3", "qwen3moe") else (4, 2)
    head_dim = 256 if arch == "gemma3" else hidden // heads  # Gemma's query scale is 1/√256 whatever the file says
    layers = {"gemma3": 6, "smollm3": 4}.get(arch, LAYERS)
    rotary = head_dim * 3 // 4 if arch == "phi3" else head_dim
    rng = np.random.default_rng(seed)
    file_arch, arch = ("llama", arch) if arch == "mixtral" else (arch, arch)
    writer = GGUFWriter(str(path), file_arch)
    for key, value, vtype, element in embedded_fields():
        writer.add_key_value(key, value, vtype, element)
    if moe:
        intermediate = 256  # each expert's width: whole k-quant blocks as the down projection's columns
        writer.add_uint32(f"{file_arch}.expert_count", EXPERTS)
        writer.add_uint32(f"{file_arch}.expert_used_count", EXPERTS_USED)
        if arch == "qwen3moe":
            writer.add_uint32("qwen3moe.expert_feed_forward_length", intermediate)
    for key, value in [
        ("block_count", layers),
        ("context_length", 512),
        ("embedding_length", hidden),
        ("feed_forward_length", intermediate),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv_heads),
        ("vocab_size", VOCAB),
        ("rope.dimension_count", rotary),
        ("attention.key_length", head_dim),
        ("attention.value_length", head_dim),
    ]:
        writer.add_uint32(f"{file_arch}.{key}", value)
    if arch == "gemma3":
        writer.add_uint32("gemma3.attention.sliding_window", 8)
    if arch == "phi3":
        writer.add_uint32("phi3.rope.scaling.original_context_length", 128)
        writer.add_float32("phi3.rope.scaling.attn_factor", 1.19)
    writer.add_float32(f"{file_arch}.rope.freq_base", 10000.0)
    writer.add_float32(f"{file_arch}.attention.layer_norm_rms_epsilon", 1e-5)

    def matrix(name: str, rows: int, columns: int, experts: int = 0) -> None:
        """A matrix, or with `experts` a 3-D tensor of that many [rows, columns] matrices."""
        kind = kinds.get(name.split(".")[-2], "q4_k")
        if experts and kind in ("f16", "f32"):
            writer.add_tensor(
                name, rng.normal(0.0, 0.05, size=(experts, rows, columns)).astype(np.float16 if kind == "f16" else np.float32)
            )
            return
        if experts:
            unit = dequantized(kind, random_blocks(kind, 4, columns, seed=int(rng.integers(1 << 30)), scale=1.0), columns).std()
            raw = random_blocks(kind, experts * rows, columns, seed=int(rng.integers(1 << 30)), scale=0.05 / unit)
            raw = raw.reshape(experts, rows, -1)
            writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind.upper()])
            return
        if kind in ("f16", "f32", "bf16"):
            values = rng.normal(0.0, 0.05, size=(rows, columns))
            if kind == "bf16":  # numpy has no bfloat16: torch rounds, gguf-py writes the bytes
                import torch

                bits = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy()
                writer.add_tensor(name, bits, raw_shape=bits.shape, raw_dtype=GGMLQuantizationType.BF16)
            else:
                writer.add_tensor(name, values.astype(np.float16 if kind == "f16" else np.float32))
            return
        unit = dequantized(kind, random_blocks(kind, 4, columns, seed=int(rng.integers(1 << 30)), scale=1.0), columns).std()
        raw = random_blocks(kind, rows, columns, seed=int(rng.integers(1 << 30)), scale=0.05 / unit)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind.upper()])

    def vector(name: str, size: int, mean: float = 1.0) -> None:
        writer.add_tensor(name, (mean + rng.normal(0.0, 0.1, size=size)).astype(np.float32))

    matrix("token_embd.weight", VOCAB, hidden)
    for i in range(layers):
        blk = f"blk.{i}."
        vector(blk + "attn_norm.weight", hidden)
        vector(blk + "ffn_norm.weight", hidden)
        if arch == "phi3":
            matrix(blk + "attn_qkv.weight", (heads + 2 * kv_heads) * head_dim, hidden)
        else:
            matrix(blk + "attn_q.weight", heads * head_dim, hidden)
            matrix(blk + "attn_k.weight", kv_heads * head_dim, hidden)
            matrix(blk + "attn_v.weight", kv_heads * head_dim, hidden)
        if arch == "qwen2":
            for part, size in (("q", hidden), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
                vector(f"{blk}attn_{part}.bias", size, mean=0.0)
        if arch in ("qwen3", "gemma3", "qwen3moe"):
            vector(blk + "attn_q_norm.weight", head_dim)
            vector(blk + "attn_k_norm.weight", head_dim)
        if arch == "olmoe":  # over the whole projections
            vector(blk + "attn_q_norm.weight", heads * head_dim)
            vector(blk + "attn_k_norm.weight", kv_heads * head_dim)
        if arch == "gemma3":  # as llama.cpp's converter writes them: 1 + the checkpoint's weight
            vector(blk + "post_attention_norm.weight", hidden)
            vector(blk + "post_ffw_norm.weight", hidden)
        matrix(blk + "attn_output.weight", hidden, heads * head_dim)
        if arch == "phi3":  # gate then up, in one tensor
            matrix(blk + "ffn_up.weight", 2 * intermediate, hidden)
        elif moe:
            writer.add_tensor(blk + "ffn_gate_inp.weight", rng.normal(0.0, 0.5, size=(EXPERTS, hidden)).astype(np.float32))
            matrix(blk + "ffn_gate_exps.weight", intermediate, hidden, EXPERTS)
            matrix(blk + "ffn_up_exps.weight", intermediate, hidden, EXPERTS)
            matrix(blk + "ffn_down_exps.weight", hidden, intermediate, EXPERTS)
            continue
        else:
            matrix(blk + "ffn_gate.weight", intermediate, hidden)
            matrix(blk + "ffn_up.weight", intermediate, hidden)
        matrix(blk + "ffn_down.weight", hidden, intermediate)
    vector("output_norm.weight", hidden)
    if not tied:
        matrix("output.weight", VOCAB, hidden)
    if rope_freqs:
        writer.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, head_dim // 2).astype(np.float32))
    if arch == "phi3":
        writer.add_tensor("rope_factors_long.weight", np.linspace(4.0, 12.0, rotary // 2).astype(np.float32))
        writer.add_tensor("rope_factors_short.weight", np.linspace(1.0, 2.0, rotary // 2).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)
