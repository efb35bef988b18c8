"""A mixture-of-experts model against llama.cpp: Qwen3-30B-A3B's shape with 8 layers, Q4_K_M
(bench/shaped_moe.py: random weights, quantized by llama.cpp's own llama-quantize), served by our
defaults and by llama-server from the same file, one after the other in each round (ours first),
each figure a ratio to llama-server's in the same round and judged against issue 45's targets.

Loads: one client (the chat questions behind the file's chat template, 32 output tokens; the
weights are random, so the text is too: ours is also measured with speculation off, since
guessing's gain depends on how the text repeats), 8 and 32 clients of
random words, a 2,000-token prompt's prefill (llama-server given one slot of 8,192 for it), ready
time. Memory is compared at an equal KV pool, as bench/peer_large.py does: llama-server's
`-c 32768` holds 32,768 tokens of float16 K/V (512 MiB for this shape); ours is started once more
with MINIVLLM_KV_CACHE_MB=512 for that figure, and each server's resident memory after load is
reported less those 512 MiB (the speed figures run with no settings at all).

Beside the ratios: output tokens/s per GB of weights read per token. A token reads the attention,
the router and 8 of the 128 experts of each layer, and the output layer (the embedding is one row:
left out); the bytes come from the file's own tensor sizes. The same figure for the dense 1.5B
(bench/peer_large.py's file, read the same way, its tied embedding counted as the output layer)
uses the same run's peer_large tok/s under bench/report.py, else the last peer_large run in
docs/bench/report.json, whose date the section states.

    python -m bench.peer_moe --rounds 1        # one round; prints the table (~15 min more the first time: the file)
    python -m bench.peer_moe --docs-dir docs/bench   # also docs/bench/raw/moe.json and the page rewritten
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from pathlib import Path

from .llama_server import LlamaServer, build, build_that_runs
from .peer import SPEC_OFF, _measure, prompts_used
from .peer_large import _cell, latency_rows, measure_spec_off, rebuilt_peer, spec_off_rows, target_rows, with_prefill_rate
from .prompts import CHAT
from .raw import measured_line, publish
from .server import EngineServer
from .shaped_moe import HEAD_DIM, KV_HEADS, LAYERS
from .shaped_moe import shaped_moe as moe_file

LOADS = (  # name, concurrency, prompts, input tokens (CHAT: chat questions), output tokens
    ("1 client", 1, 4, CHAT, "32"),
    ("8 clients", 8, 16, "8-40", "32"),
    ("32 clients", 32, 32, "8-40", "32"),
)
PREFILL = ("2,000-token prompt", 1, 2, "2000", "1")
TARGETS = {  # (load, figure): (target ratio to llama-server, higher is better)
    ("1 client", "tok/s"): (1.3, True),
    ("8 clients", "tok/s"): (1.5, True),
    ("32 clients", "tok/s"): (2.0, True),
    ("2,000-token prompt", "prefill tok/s"): (1.5, True),
    ("start", "ready s"): (1.5, False),
    ("start", "resident MB less the KV pool"): (1.25, False),
}
KV_BYTES_PER_TOKEN = LAYERS * 2 * KV_HEADS * HEAD_DIM * 2  # layers x (K, V) x KV heads x head_dim x float16
POOL_MB = 32768 * KV_BYTES_PER_TOKEN / 2**20  # llama-server's -c 32768 in float16: 512 MiB
SEED = 400
DENSE_REPORT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "report.json"


def active_weights(gguf: str) -> dict:
    """Bytes of the file's tensors, and of those one token reads: all but the experts and the
    embedding, `expert_used_count` / `expert_count` of the experts, and the embedding only where it
    is the output layer too (tied). GB are 10^9 bytes."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf)
    arch = reader.fields["general.architecture"].contents()
    experts = reader.fields.get(f"{arch}.expert_count")
    used = reader.fields.get(f"{arch}.expert_used_count")
    share = used.contents() / experts.contents() if experts and used else 1.0
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    tied = "output.weight" not in sizes
    expert_bytes = sum(n for name, n in sizes.items() if "_exps." in name)
    embedding = sizes.get("token_embd.weight", 0)
    dense_bytes = sum(sizes.values()) - expert_bytes - (0 if tied else embedding)
    return {
        "architecture": arch,
        "total_gb": sum(sizes.values()) / 1e9,
        "expert_gb": expert_bytes / 1e9,
        "experts_read": f"{used.contents()} of {experts.contents()}" if experts and used else None,
        "active_gb": (dense_bytes + expert_bytes * share) / 1e9,
        "embedding_counted": tied,
    }


def dense_figures(large: dict | None = None) -> dict:
    """The dense 1.5B's active GB (from its file, if built here) and its tok/s: from `large`, a
    peer_large result of this run (bench/report.py passes it), else from the last one in
    docs/bench/report.json; what is missing says why."""
    from .shaped_model import MODELS
    from .shaped_model import NAME as DENSE

    out: dict = {"gguf": str(MODELS / f"{DENSE}-Q4_K_M.gguf")}
    if os.path.isfile(out["gguf"]):
        out.update(active_weights(out["gguf"]))
    else:
        out["missing"] = "its file is not built here (python -m bench.shaped_model)"
    report = {}
    if large is None:
        try:
            report = json.loads(DENSE_REPORT.read_text())
        except (OSError, ValueError):
            pass
        large = report.get("peer_large") or {}
    if large.get("rounds"):
        out["tok/s"] = {
            side: {load[0]: _median([r[side][load[0]].get("tok/s") for r in large["rounds"]]) for load in LOADS}
            for side in ("ours", "llama-server")
        }
        out["measured"] = (report.get("machine") or {}).get("date") if report else "this run"
        out["commit"] = (report.get("machine") or {}).get("git_commit") if report else None
    else:
        out.setdefault("missing", "docs/bench/report.json has no peer_large run")
    return out


def _median(values) -> float | None:
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(present) if present else None


def one_round(tokenizer, gguf: str, r: int, results_dir: str) -> dict:
    row = {}
    log = lambda name: os.path.join(results_dir, f"moe-{name}-{r}.log")  # noqa: E731
    # the memory start goes first: a file's first start packs its blocks and caches them for the
    # next (gguf/packed_cache.py), so the start timed below is the one a user makes every day after
    env = {"MINIVLLM_MODEL": gguf, "MINIVLLM_KV_CACHE_MB": str(int(POOL_MB))}
    with EngineServer(env, log_path=log("ours-memory")) as ours:
        memory = {"resident MB less the KV pool": ours.resident_after_load_mb() - POOL_MB}
        memory["kv_pool_mb"], memory["earlier start's ready s"] = ours.stats.get("kv_pool_mb"), ours.ready_s
    with EngineServer({"MINIVLLM_MODEL": gguf}, log_path=log("ours")) as ours:
        row["ours"] = {"start": {"ready s": ours.ready_s, "command": ours.command, **memory}}
        row["ours"]["start"]["resident MB after load"] = ours.resident_after_load_mb()
        row["ours"].update({load[0]: _measure(ours.base_url, tokenizer, load, seed=SEED + r) for load in LOADS})
        row["ours"][PREFILL[0]] = with_prefill_rate(_measure(ours.base_url, tokenizer, PREFILL, seed=SEED + r))
    row[SPEC_OFF] = measure_spec_off({"MINIVLLM_MODEL": gguf}, tokenizer, LOADS[0], SEED + r, log("ours-spec-off"))
    with LlamaServer(gguf, log_path=log("llama")) as peer:
        rss = peer.resident_after_load_mb()
        row["llama-server"] = {"start": {"ready s": peer.ready_s, "command": peer.command, "build": peer.build}}
        row["llama-server"]["start"]["resident MB after load"] = rss
        row["llama-server"]["start"]["resident MB less the KV pool"] = rss - POOL_MB
        row["llama-server"].update({load[0]: _measure(peer.base_url, tokenizer, load, seed=SEED + r) for load in LOADS})
    with LlamaServer(gguf, slots=1, context=8192, log_path=log("llama-prefill")) as peer:
        row["llama-server"][PREFILL[0]] = with_prefill_rate(_measure(peer.base_url, tokenizer, PREFILL, seed=SEED + r))
    return row


def _per_gb(tok_s, gb) -> float | None:
    return tok_s / gb if tok_s is not None and gb else None


def bandwidth_rows(result: dict) -> list[str]:
    """Output tok/s per GB of weights read per token, the MoE's (this run) and the dense 1.5B's
    (its own run, dated)."""
    moe, dense = result.get("weights") or {}, result.get("dense") or {}
    lines = [
        "Output tokens/s per GB of weights read per token (a token reads the attention, the router, "
        f"{moe.get('experts_read', '8 of 128')} experts per layer and the output layer; GB are 10^9 bytes, "
        "from the file's tensor sizes):",
        "",
        "| model | GB in the file | GB read per token | load | llama-server tok/s | per GB | ours tok/s | per GB |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    rounds = result["rounds"]
    for load in LOADS:
        theirs = _median([r["llama-server"][load[0]].get("tok/s") for r in rounds])
        ours = _median([r["ours"][load[0]].get("tok/s") for r in rounds])
        gb = moe.get("active_gb")
        lines.append(
            f"| MoE, this run | {_cell([moe.get('total_gb')])} | {_cell([gb], 3)} | {load[0]} | {_cell([theirs])} | "
            f"{_cell([_per_gb(theirs, gb)])} | {_cell([ours])} | {_cell([_per_gb(ours, gb)])} |"
        )
    if dense.get("active_gb") and dense.get("tok/s"):
        gb = dense["active_gb"]
        for load in LOADS:
            theirs, ours = dense["tok/s"]["llama-server"].get(load[0]), dense["tok/s"]["ours"].get(load[0])
            lines.append(
                f"| dense 1.5B, {dense.get('measured') or '?'} | {_cell([dense.get('total_gb')])} | {_cell([gb], 3)} | "
                f"{load[0]} | {_cell([theirs])} | {_cell([_per_gb(theirs, gb)])} | {_cell([ours])} | {_cell([_per_gb(ours, gb)])} |"
            )
        when = (
            "this run's peer_large rounds"
            if dense.get("measured") == "this run"
            else f"the peer_large run in docs/bench/report.json (measured {dense.get('measured') or '?'}, "
            f"commit {dense.get('commit') or 'unknown'}), not this run"
        )
        lines += [
            "",
            f"The dense rows: `{os.path.basename(dense['gguf'])}` (its tied embedding is its output layer, so counted), "
            f"tok/s from {when}.",
        ]
    else:
        lines += ["", f"No dense 1.5B rows: {dense.get('missing') or 'not computed'}."]
    return lines


def render(result: dict) -> list[str]:
    rounds = result["rounds"]
    rebuilt, caveat = rebuilt_peer(rounds)
    lines = [
        f"## Mixture of experts: Qwen3-30B-A3B's shape ({LAYERS} layers) Q4_K_M against llama-server",
        "",
        f"`{os.path.basename(result['gguf'])}` (llama.cpp's `qwen3moe`: 2048 wide, 32 query heads over 4 KV heads, "
        f"128 experts of width 768, 8 used per token; random weights, quantized by llama.cpp's `llama-quantize`); "
        f"CPU flags: {result.get('isa', '?')}. Ours with no settings; llama-server: "
        f"`{rounds[0]['llama-server']['start']['command']}`. Memory: resident after load less the {POOL_MB:.0f} MiB "
        f"KV pool each holds (ours started with MINIVLLM_KV_CACHE_MB={POOL_MB:.0f} for that figure). One client: "
        "bench/prompts.py's chat questions behind the chat template, ours with speculation on (our default)"
        + (" and off" if all(SPEC_OFF in r for r in rounds) else "")
        + " (the weights are random, so the text is too, and what guessing gains depends on how it repeats); the other "
        "loads: seeded random words.",
        "",
        measured_line(result.get("machine") or {}, result.get("command")),
        "",
    ]
    if rebuilt:
        lines += [f"**llama-server ran {', '.join(rebuilt)} here, not its native build: no target below counts as met.**", ""]
    lines += target_rows(rounds, TARGETS, rebuilt, caveat) + spec_off_rows(rounds, LOADS[0][0], caveat)
    first = [r["ours"]["start"].get("earlier start's ready s") for r in rounds]
    lines.append(
        f"| start | ready s, ours: the round's first start (the memory one, before the timed one) | | {_cell(first)} | | | |"
    )
    after = [[r[side]["start"].get("resident MB after load") for r in rounds] for side in ("llama-server", "ours")]
    lines.append(f"| start | resident MB after load, no settings | {_cell(after[0], 0)} | {_cell(after[1], 0)} | | | |")
    lines += latency_rows(rounds, (*LOADS, PREFILL))  # the latencies beside the targets
    return lines + [""] + bandwidth_rows(result) + [""]


def run(*, rounds: int, results_dir: str, large: dict | None = None) -> dict:
    """Each round's figures for both servers, the weights a token reads, the dense model's figure
    (its tok/s from `large`, this run's bench/peer_large.py result, where given)."""
    from .machine import machine_info
    from .model_files import load_tokenizer

    build(build_that_runs())
    gguf = str(moe_file())
    tokenizer = load_tokenizer()  # the file's tokenizer is the embedded one, padded with unused tokens
    machine = machine_info()
    result = {
        "gguf": gguf,
        "rounds": [],
        "machine": machine,
        "command": "python -m bench.peer_moe",
        "isa": " ".join(machine["isa_flags"]),
        "prompts": prompts_used((*LOADS, PREFILL)),
        "weights": active_weights(gguf),
        "dense": dense_figures(large),
    }
    for r in range(rounds):
        result["rounds"].append(one_round(tokenizer, gguf, r, results_dir))
        print(f"moe round {r + 1} done", flush=True)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/moe.json and rewrite the page there")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    result = run(rounds=args.rounds, results_dir=args.results_dir)
    result["command"] = "python -m bench.peer_moe" + (f" --rounds {args.rounds}" if args.rounds != 1 else "")
    with open(os.path.join(args.results_dir, "peer-moe.json"), "w") as out:
        json.dump(result, out, indent=1)
    if args.docs_dir:
        publish(args.docs_dir, "moe", result)
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
