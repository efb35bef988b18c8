"""Gemma 4 (sliding + full attention, KV-shared layers, per-layer inputs) against llama.cpp: Gemma 4
E2B's shape, Q4_K_M (bench/shaped_gemma4.py: random weights, llama.cpp's own converter and
llama-quantize), served by ours and by llama-server from the same file, one after the other in each
round (ours first), speculation off on both sides (ours: MINIVLLM_SPECULATIVE=off and nothing else;
llama-server speculates only when asked), each figure a ratio to llama-server's in the same round
and judged against issue 53's targets.

Loads, as bench/peer_qwen35.py's (bench/peer_shaped.py runs both): one client (the chat questions as
plain prompts: the file carries Gemma 3 270M's tokenizer, which has no chat template; 32 output
tokens; the weights are random, so the text is too, but speed does not depend on it), 8 and 32
clients of random words, a 2,000-token prompt's prefill (llama-server given one slot of 8,192 for it:
past the 512-token window, 28 of 35 layers attend to their last 512 keys only), ready time, resident
memory after load. The requests are tokenized by the file's own tokenizer (as our server reads it).
Memory is compared as each server starts with no settings: ours plans its KV pool from the machine's
memory; llama-server's `-np 32 -c 32768` holds PEER_KV_MB = 576 MiB of float16 K/V, computed from
E2B's layout as llama.cpp allocates it (llama-kv-cache-iswa.cpp, checked against its own log on a
file of this layout): only the 15 layers before the 20 KV-shared ones keep K/V, 12 sliding layers
with 1 KV head of 256 and 3 full layers with 1 KV head of 512; `-np 32` without `--kv-unified` gives
each slot its own 32768 / 32 = 1,024 cells (padded to 256) on the full layers, and its SWA cache
keeps min(slot cells, window + ubatch) = min(1,024, 512 + 512) = 1,024 cells on the sliding layers,
so at this context the window saves llama-server nothing: 32 x 1,024 x 2 (K, V) x 2 bytes x
(12 x 256 + 3 x 512) = 384 MiB on the sliding layers + 192 MiB on the full ones. Ours is started once
before the measured start: a file's first start packs its blocks and caches them for the next
(gguf/packed_cache.py), so the start measured is the one a user makes every day after.

The raw result goes to DOCS_DIR/raw/gemma4.json and its table to DOCS_DIR/gemma4.md (the generated
page benchmarks.md has no section for it: bench/raw.py's RAW_SECTIONS would have to name it).

    python -m bench.peer_gemma4 --rounds 1                    # prints the table (~10-20 min more the first time: the file)
    python -m bench.peer_gemma4 --rounds 1 --docs-dir docs/bench   # also docs/bench/raw/gemma4.json and docs/bench/gemma4.md
"""

from __future__ import annotations

from . import peer_shaped
from .shaped_gemma4 import (
    FULL_KV_LAYERS,
    GLOBAL_HEAD_DIM,
    HEAD_DIM,
    KV_HEADS,
    KV_SHARED_LAYERS,
    LAYERS,
    SLIDING_KV_LAYERS,
    SLIDING_WINDOW,
)
from .shaped_gemma4 import shaped_gemma4 as gemma4_file

NAME = "gemma4"
SLOTS, CONTEXT = 32, 32768  # bench/llama_server.py's LlamaServer: -np 32 -c 32768
UBATCH = 512  # llama-server's default -ub


def _pad(cells: int) -> int:
    return -(-cells // 256) * 256  # llama.cpp pads each cache to 256 cells


SLOT_CELLS = _pad(CONTEXT // SLOTS)  # 1,024: a slot's cells on the full layers (one stream per slot)
SWA_CELLS = _pad(min(SLOT_CELLS, SLIDING_WINDOW + UBATCH))  # 1,024: a slot's cells on the sliding layers
KV_BYTES = SLOTS * 2 * 2 * KV_HEADS * (SWA_CELLS * SLIDING_KV_LAYERS * HEAD_DIM + SLOT_CELLS * FULL_KV_LAYERS * GLOBAL_HEAD_DIM)
PEER_KV_MB = KV_BYTES / 2**20  # slots x (K, V) x f16 x heads x cells x layers x dim: 384 + 192 = 576 MiB
SEED = 600


def _tokenizer(gguf: str):
    """The file's own tokenizer, as our server reads it (Gemma 3 270M's vocabulary)."""
    from inference.engine.gguf.checkpoint import GGUFCheckpoint

    return GGUFCheckpoint.open(gguf).tokenizer


SPEC = peer_shaped.Shaped(
    name=NAME,
    doc=__doc__,
    heading="## Gemma 4: Gemma 4 E2B's shape Q4_K_M against llama-server, speculation off",
    shape=(
        f"llama.cpp's `gemma4`: {LAYERS} layers of 1536, 4 sliding-window layers ({SLIDING_WINDOW} tokens; 8 query heads "
        f"over {KV_HEADS} KV head of {HEAD_DIM}) then 1 full-attention layer (8 over {KV_HEADS} of {GLOBAL_HEAD_DIM}); the "
        f"last {KV_SHARED_LAYERS} layers read earlier layers' K/V and have a 12288-wide MLP, the others 6144; 256-wide "
        "per-layer inputs, a tied 262,144-token embedding; random weights, llama.cpp's own converter, quantized by "
        "`llama-quantize`"
    ),
    memory=(
        f"ours plans its KV pool from the machine's memory; llama-server's holds {PEER_KV_MB:.0f} MiB of K/V: "
        f"{SLOTS} slots of {SLOT_CELLS:,} tokens on the {SLIDING_KV_LAYERS + FULL_KV_LAYERS} layers that keep K/V"
    ),
    one_client="as plain prompts (the file has no chat template)",
    seed=SEED,
    gguf=gemma4_file,
    tokenizer=_tokenizer,
)


def main(argv=None) -> None:
    """The rounds, the table and (with --docs-dir) DOCS_DIR/raw/gemma4.json and DOCS_DIR/gemma4.md: bench/peer_shaped.py."""
    peer_shaped.main(SPEC, argv)


if __name__ == "__main__":
    main()
