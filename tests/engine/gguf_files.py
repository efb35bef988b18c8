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
