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

    python -m bench.peer_qwen35 --rounds 1                    # prints the table (~10 min more the first time: the file)
    python -m bench.peer_qwen35 --rounds 1 --docs-dir docs/bench   # also docs/bench/raw/qwen35.json and docs/bench/qwen35.md
"""

from __future__ import annotations

import argparse
import json
import os

from .llama_server import LlamaServer, build, build_that_runs
from .peer import _measure, prompts_used
from .peer_large import _cell, target_rows, with_prefill_rate
from .prompts import CHAT
from .raw import RAW_SECTIONS, measured_line, raw_path, save_raw
from .server import EngineServer
from .shaped_qwen35 import FULL_ATTENTION_LAYERS, HEAD_DIM, KV_HEADS, LAYERS
from .shaped_qwen35 import shaped_qwen35 as qwen35_file

NAME = "qwen35"
LOADS = (  # name, concurrency, prompts, input tokens (CHAT: chat questions), output tokens
    ("1 client", 1, 4, CHAT, "32"),
    ("8 clients", 8, 16, "8-40", "32"),
    ("32 clients", 32, 32, "8-40", "32"),
)
PREFILL = ("2,000-token prompt", 1, 2, "2000", "1")
TARGETS = {  # (load, figure): (target ratio to llama-server, higher is better): issue 53
    ("1 client", "tok/s"): (1.0, True),
    ("8 clients", "tok/s"): (2.0, True),
    ("32 clients", "tok/s"): (2.0, True),
    ("2,000-token prompt", "prefill tok/s"): (1.5, True),
    ("start", "ready s"): (1.5, False),
    ("start", "resident MB after load"): (1.0, False),
}
OURS_ENV = {"MINIVLLM_SPECULATIVE": "off"}  # with MINIVLLM_MODEL, the only settings
KV_BYTES_PER_TOKEN = FULL_ATTENTION_LAYERS * 2 * KV_HEADS * HEAD_DIM * 2  # attention layers x (K, V) x heads x dim x f16
PEER_KV_MB = 32768 * KV_BYTES_PER_TOKEN / 2**20  # llama-server's -c 32768: 384 MiB
SEED = 500
STATS_KEPT = ("weights_mb", "kv_pool_mb", "kv_blocks_total", "num_slots", "weights", "speculative")  # ours, from /stats


def one_round(tokenizer, gguf: str, r: int, results_dir: str) -> dict:
    row = {}
    log = lambda name: os.path.join(results_dir, f"qwen35-{name}-{r}.log")  # noqa: E731
    env = {"MINIVLLM_MODEL": gguf, **OURS_ENV}
    with EngineServer(env, log_path=log("ours-first")) as ours:  # packs the blocks once (the packed cache)
        first = {"earlier start's ready s": ours.ready_s}
    with EngineServer(env, log_path=log("ours")) as ours:
        start = {"ready s": ours.ready_s, "command": ours.command, **first}
        start["resident MB after load"] = ours.resident_after_load_mb()
        start.update({k: ours.stats.get(k) for k in STATS_KEPT if k in ours.stats})
        row["ours"] = {"start": start}
        row["ours"].update({load[0]: _measure(ours.base_url, tokenizer, load, seed=SEED + r) for load in LOADS})
        row["ours"][PREFILL[0]] = with_prefill_rate(_measure(ours.base_url, tokenizer, PREFILL, seed=SEED + r))
        row["ours"]["start"]["resident MB after the loads"] = ours.resident_mb()
    with LlamaServer(gguf, log_path=log("llama")) as peer:
        start = {"ready s": peer.ready_s, "command": peer.command, "build": peer.build}
        start["resident MB after load"] = peer.resident_after_load_mb()
        row["llama-server"] = {"start": start}
        row["llama-server"].update({load[0]: _measure(peer.base_url, tokenizer, load, seed=SEED + r) for load in LOADS})
        row["llama-server"]["start"]["resident MB after the loads"] = peer.resident_mb()
    with LlamaServer(gguf, slots=1, context=8192, log_path=log("llama-prefill")) as peer:
        row["llama-server"][PREFILL[0]] = with_prefill_rate(_measure(peer.base_url, tokenizer, PREFILL, seed=SEED + r))
        row["llama-server"]["start"]["prefill command"] = peer.command
    return row


def render(result: dict) -> list[str]:
    rounds = result["rounds"]
    rebuilt = sorted({r["llama-server"]["start"].get("build", "native") for r in rounds} - {"native"})
    caveat = f" (peer rebuilt {', '.join(rebuilt)}: not its native build)" if rebuilt else ""
    lines = [
        "## Qwen3.5 (hybrid): Qwen3.5-2B's shape Q4_K_M against llama-server, speculation off",
        "",
        f"`{os.path.basename(result['gguf'])}` (llama.cpp's `qwen35`: {LAYERS} layers of 2048, 3 Gated DeltaNet layers "
        "(16 K / 16 V heads of 128) then 1 gated attention layer (8 query heads over 2 KV heads of 256), a 6144-wide "
        "MLP, a tied 248,320-token embedding; random weights, llama.cpp's own converter, quantized by `llama-quantize`); "
        f"CPU flags: {result.get('isa', '?')}. Ours: `{rounds[0]['ours']['start']['command']}`; llama-server: "
        f"`{rounds[0]['llama-server']['start']['command']}` (no speculation unless asked). Memory: each server's resident "
        "memory after load with those settings (ours plans its KV pool and state slots from the machine's memory; "
        f"llama-server's holds {PEER_KV_MB:.0f} MiB of K/V and 32 slots of recurrent state). One client: bench/prompts.py's "
        "chat questions behind the chat template; the other loads: seeded random words. The weights are random, so the "
        "text is too; speed does not depend on it.",
        "",
        measured_line(result.get("machine") or {}, result.get("command")),
        "",
    ]
    if rebuilt:
        lines += [f"**llama-server ran {', '.join(rebuilt)} here, not its native build: no target below counts as met.**", ""]
    lines += target_rows(rounds, TARGETS, rebuilt, caveat)
    after = [[r[side]["start"].get("resident MB after the loads") for r in rounds] for side in ("llama-server", "ours")]
    lines.append(f"| end | resident MB after the loads | {_cell(after[0], 0)} | {_cell(after[1], 0)} | | | |")
    for load in (*LOADS, PREFILL):  # the latencies beside the targets
        theirs = [r["llama-server"][load[0]] for r in rounds]
        ours = [r["ours"][load[0]] for r in rounds]
        lines.append(
            f"| {load[0]} | ITL p50 / TTFT p50 ms | {_cell([t.get('ITL p50') for t in theirs], 0)} / "
            f"{_cell([t.get('TTFT p50') for t in theirs], 0)} | {_cell([o.get('ITL p50') for o in ours], 0)} / "
            f"{_cell([o.get('TTFT p50') for o in ours], 0)} | | | |"
        )
    return lines + [""]


def run(*, rounds: int, results_dir: str) -> dict:
    """Each round's figures for both servers."""
    from .machine import machine_info
    from .model_files import load_tokenizer

    build(build_that_runs())
    gguf = str(qwen35_file())
    tokenizer = load_tokenizer()  # the file's tokenizer is the embedded one, padded with unused tokens
    machine = machine_info()
    result = {
        "gguf": gguf,
        "gguf_bytes": os.path.getsize(gguf),
        "rounds": [],
        "machine": machine,
        "command": "python -m bench.peer_qwen35",
        "isa": " ".join(machine["isa_flags"]),
        "prompts": prompts_used((*LOADS, PREFILL)),
        "ours_settings": OURS_ENV,
    }
    for r in range(rounds):
        result["rounds"].append(one_round(tokenizer, gguf, r, results_dir))
        print(f"qwen35 round {r + 1} done", flush=True)
    return result


def save(docs_dir: str, result: dict) -> list[str]:
    """DOCS_DIR/raw/qwen35.json (bench/raw.py's save_raw where its RAW_SECTIONS names it, else the same
    file written here) and DOCS_DIR/qwen35.md, the table rendered from it; the shared page is left alone."""
    if NAME in RAW_SECTIONS:
        raw = save_raw(docs_dir, NAME, result)
    else:
        raw = raw_path(docs_dir, NAME)
        os.makedirs(os.path.dirname(raw), exist_ok=True)
        with open(raw, "w") as f:
            json.dump(result, f, indent=1)
    page = os.path.join(docs_dir, f"{NAME}.md")
    with open(page, "w") as f:
        f.write(f"<!-- generated by python -m bench.peer_qwen35 from raw/{NAME}.json: do not edit -->\n\n")
        f.write("\n".join(render(result)))
    return [raw, page]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/qwen35.json and DOCS_DIR/qwen35.md")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    result = run(rounds=args.rounds, results_dir=args.results_dir)
    result["command"] = "python -m bench.peer_qwen35" + (f" --rounds {args.rounds}" if args.rounds != 1 else "")
    with open(os.path.join(args.results_dir, "peer-qwen35.json"), "w") as out:
        json.dump(result, out, indent=1)
    if args.docs_dir:
        print("wrote " + ", ".join(save(args.docs_dir, result)))
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
