"""Qwen3.5 (hybrid: Gated DeltaNet + gated attention) against llama.cpp: Qwen3.5-2B's shape, Q4_K_M
(bench/shaped_qwen35.py: random weights, llama.cpp's own converter and llama-quantize), served by ours
and by llama-server from the same file, one after the other in each round (ours first), speculation
off on both sides (ours: MINIVLLM_SPECULATIVE=off and nothing else; llama-server speculates only when
asked), each figure a ratio to llama-server's in the same round and judged against issue 53's targets.

Loads, as bench/peer_moe.py's: one client (the chat questions behind the file's chat template, 32
output tokens; the weights are random, so the text is too, but speed does not depend on it), 8 and
32 clients of random words, a 2,000-token prompt's prefill (llama-server given one slot of 8,192 for
it), ready time, resident memory after load. Memory is compared as each server starts with no
settings: ours plans its KV pool and its recurrent-state slots (32 running + 32 prefix checkpoints)
from the machine's memory; llama-server's `-np 32 -c 32768` holds 32,768 tokens of float16 K/V on the
6 attention layers (384 MiB) and 32 slots of float32 recurrent state. Ours is started once before
the measured start: a file's first start packs its blocks and caches them for the next
(gguf/packed_cache.py), so the start measured is the one a user makes every day after.

The raw result goes to DOCS_DIR/raw/qwen35.json and its table to DOCS_DIR/qwen35.md (the generated
page benchmarks.md has no Qwen3.5 section yet: bench/raw.py's RAW_SECTIONS would have to name it).
The loads, the rounds, the table and the files are bench/peer_shaped.py's, shared with
bench/peer_gemma4.py; this module says what is Qwen3.5's.

    python -m bench.peer_qwen35 --rounds 1                    # prints the table (~10 min more the first time: the file)
    python -m bench.peer_qwen35 --rounds 1 --docs-dir docs/bench   # also docs/bench/raw/qwen35.json and docs/bench/qwen35.md
"""

from __future__ import annotations

from . import peer_shaped
from .peer_shaped import LOADS, OURS_ENV, PREFILL, STATS_KEPT, TARGETS  # noqa: F401 (this bench's, as before)
from .shaped_qwen35 import FULL_ATTENTION_LAYERS, HEAD_DIM, KV_HEADS, LAYERS
from .shaped_qwen35 import shaped_qwen35 as qwen35_file

NAME = "qwen35"
KV_BYTES_PER_TOKEN = FULL_ATTENTION_LAYERS * 2 * KV_HEADS * HEAD_DIM * 2  # attention layers x (K, V) x heads x dim x f16
PEER_KV_MB = 32768 * KV_BYTES_PER_TOKEN / 2**20  # llama-server's -c 32768: 384 MiB
SEED = 500


def _tokenizer(gguf: str):
    """The file's tokenizer is the embedded one, padded with unused tokens."""
    from .model_files import load_tokenizer

    return load_tokenizer()


SPEC = peer_shaped.Shaped(
    name=NAME,
    doc=__doc__,
    heading="## Qwen3.5 (hybrid): Qwen3.5-2B's shape Q4_K_M against llama-server, speculation off",
    shape=(
        f"llama.cpp's `qwen35`: {LAYERS} layers of 2048, 3 Gated DeltaNet layers (16 K / 16 V heads of 128) then 1 gated "
        "attention layer (8 query heads over 2 KV heads of 256), a 6144-wide MLP, a tied 248,320-token embedding; random "
        "weights, llama.cpp's own converter, quantized by `llama-quantize`"
    ),
    memory=(
        "ours plans its KV pool and state slots from the machine's memory; llama-server's holds "
        f"{PEER_KV_MB:.0f} MiB of K/V and 32 slots of recurrent state"
    ),
    one_client="behind the chat template",
    seed=SEED,
    gguf=qwen35_file,
    tokenizer=_tokenizer,
)


def main(argv=None) -> None:
    """The rounds, the table and (with --docs-dir) DOCS_DIR/raw/qwen35.json and DOCS_DIR/qwen35.md: bench/peer_shaped.py."""
    peer_shaped.main(SPEC, argv)


if __name__ == "__main__":
    main()
