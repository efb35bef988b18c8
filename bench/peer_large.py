"""The model class people download: a 1.5B Q4_K_M (bench/shaped_model.py) served by our defaults
and by llama.cpp's llama-server from the same file, one after the other in each round (ours first),
each figure a ratio to llama-server's in the same round and judged against issue 28's targets.

Memory is compared at an equal KV pool: llama-server's `-c 32768` holds 32,768 tokens of float16
K/V (896 MiB for this shape); ours is started with MINIVLLM_KV_CACHE_MB set to the same 896 MiB for
that one figure (the speed figures run with no settings at all, the planned pool), and each
server's resident memory after load is reported less those 896 MiB.

One client sends chat questions (bench/prompts.py's CHAT_QUESTIONS behind the chat template), to
ours with speculation on (the default) and off; the other loads send seeded random words. A verdict
needs every round's figure: a load with a failed request is measured again (bench/peer.py's
_measure), and one that still fails is "not measured".

Where llama-server had to be rebuilt without its native AMX path (it crashes starting on some
Xeons: bench/llama_server.py), every ratio says so and no target counts as met against that build.

    python -m bench.peer_large                 # one round, ~8 min on 2 cores; prints the table
"""

from __future__ import annotations

import argparse
import json
import math
import os

from .llama_server import LlamaServer, build, build_that_runs
from .peer import SPEC_OFF, _measure, prompts_line, prompts_used
from .prompts import CHAT
from .server import EngineServer
from .shaped_model import shaped_model

LOADS = (  # name, concurrency, prompts, input tokens (CHAT: chat questions), output tokens
    ("1 client", 1, 4, CHAT, "32"),
    ("8 clients", 8, 16, "8-40", "32"),
    ("32 clients", 32, 32, "8-40", "32"),
)
PREFILL = ("2,000-token prompt", 1, 2, "2000", "1")
TARGETS = {  # (load, figure): (target ratio to llama-server, higher is better)
    ("1 client", "tok/s"): (1.3, True),
    ("8 clients", "tok/s"): (1.5, True),
    ("8 clients", "TTFT p50"): (1.0, False),
    ("32 clients", "tok/s"): (2.0, True),
    ("2,000-token prompt", "prefill tok/s"): (1.5, True),
    ("start", "ready s"): (1.5, False),
    ("start", "resident MB less the KV pool"): (1.25, False),
}
KV_BYTES_PER_TOKEN = 28 * 2 * 2 * 128 * 2  # layers x (K, V) x KV heads x head_dim x float16


POOL_MB = 32768 * KV_BYTES_PER_TOKEN / 2**20  # llama-server's -c 32768 in float16: 896 MiB


def with_prefill_rate(figures: dict) -> dict:
    """The prompt's tokens over its time to first token (one output token: the prefill is the whole request)."""
    ttft = figures.get("TTFT p50")
    return {**figures, "prefill tok/s": int(PREFILL[3]) / (ttft / 1000) if ttft else None}


def _not_measured(values) -> bool:
    return not values or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def one_round(tokenizer, gguf: str, r: int, results_dir: str) -> dict:
    row = {}
    with EngineServer({"MINIVLLM_MODEL": gguf}, log_path=os.path.join(results_dir, f"large-ours-{r}.log")) as ours:
        row["ours"] = {load[0]: _measure(ours.base_url, tokenizer, load, seed=200 + r) for load in LOADS}
        row["ours"][PREFILL[0]] = with_prefill_rate(_measure(ours.base_url, tokenizer, PREFILL, seed=200 + r))
        row["ours"]["start"] = {"ready s": ours.ready_s, "command": ours.command}
    log = os.path.join(results_dir, f"large-ours-spec-off-{r}.log")
    row[SPEC_OFF] = measure_spec_off({"MINIVLLM_MODEL": gguf}, tokenizer, LOADS[0], 200 + r, log)
    env = {"MINIVLLM_MODEL": gguf, "MINIVLLM_KV_CACHE_MB": str(int(POOL_MB))}
    with EngineServer(env, log_path=os.path.join(results_dir, f"large-ours-memory-{r}.log")) as ours:
        row["ours"]["start"]["resident MB less the KV pool"] = ours.resident_after_load_mb() - POOL_MB
        row["ours"]["start"]["kv_pool_mb"] = ours.stats.get("kv_pool_mb")
    with LlamaServer(gguf, log_path=os.path.join(results_dir, f"large-llama-{r}.log")) as peer:
        rss = peer.resident_after_load_mb()
        row["llama-server"] = {load[0]: _measure(peer.base_url, tokenizer, load, seed=200 + r) for load in LOADS}
        row["llama-server"]["start"] = {"ready s": peer.ready_s, "command": peer.command, "build": peer.build}
        row["llama-server"]["start"]["resident MB less the KV pool"] = rss - POOL_MB
    with LlamaServer(gguf, slots=1, context=8192, log_path=os.path.join(results_dir, f"large-llama-prefill-{r}.log")) as peer:
        row["llama-server"][PREFILL[0]] = with_prefill_rate(_measure(peer.base_url, tokenizer, PREFILL, seed=200 + r))
    return row


def _cell(values, digits=2) -> str:
    return ", ".join("–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}" for v in values)


def rebuilt_peer(rounds: list[dict]) -> tuple[list[str], str]:
    """(the llama-server builds the rounds ran other than its native one, the caveat a ratio carries then)."""
    rebuilt = sorted({r["llama-server"]["start"].get("build", "native") for r in rounds} - {"native"})
    return rebuilt, f" (peer rebuilt {', '.join(rebuilt)}: not its native build)" if rebuilt else ""


def measure_spec_off(env: dict, tokenizer, load, seed: int, log_path: str) -> dict:
    """The one-client load on a second server of ours with speculation off (SPEC_OFF's figures):
    where the chat questions' replies repeat, guessing is most of the one-client lead."""
    with EngineServer({**env, "MINIVLLM_SPECULATIVE": "off"}, log_path=log_path) as ours:
        return {load[0]: _measure(ours.base_url, tokenizer, load, seed=seed)}


def spec_off_rows(rounds: list[dict], load: str, caveat: str) -> list[str]:
    """`load`'s tok/s with our speculation off beside llama-server's (shown, not judged), where every round has it."""
    if not all(SPEC_OFF in r for r in rounds):
        return []
    theirs = [r["llama-server"][load].get("tok/s") for r in rounds]
    off = [r[SPEC_OFF][load].get("tok/s") for r in rounds]
    ratios = [o / t if o is not None and t else math.nan for o, t in zip(off, theirs)]
    return [f"| {load}, speculation off | tok/s | {_cell(theirs)} | {_cell(off)} | {_cell(ratios)}x{caveat} | | |"]


def latency_rows(rounds: list[dict], loads) -> list[str]:
    """The ITL and TTFT medians of each load, beside the targets (not judged)."""
    lines = []
    for load in loads:
        theirs = [r["llama-server"][load[0]] for r in rounds]
        ours = [r["ours"][load[0]] for r in rounds]
        lines.append(
            f"| {load[0]} | ITL p50 / TTFT p50 ms | {_cell([t.get('ITL p50') for t in theirs], 0)} / "
            f"{_cell([t.get('TTFT p50') for t in theirs], 0)} | {_cell([o.get('ITL p50') for o in ours], 0)} / "
            f"{_cell([o.get('TTFT p50') for o in ours], 0)} | | | |"
        )
    return lines


def target_rows(rounds: list[dict], targets: dict, rebuilt: list[str], caveat: str) -> list[str]:
    """The table of figures against llama-server's, one row per (load, figure) target, judged over
    every round (bench/peer_gemma3.py's table too)."""
    lines = ["| load | figure | llama-server | ours | ratio | target | verdict |", "|---|---|---:|---:|---:|---:|---|"]
    for (load, figure), (target, higher) in targets.items():
        theirs = [r["llama-server"][load].get(figure) for r in rounds]
        ours = [r["ours"][load].get(figure) for r in rounds]
        ratios = [o / t if o is not None and t else math.nan for o, t in zip(ours, theirs)]
        met = [x >= target if higher else x <= target for x in ratios]
        verdict = "not measured" if _not_measured(ratios) else ("met" if all(met) else "not met")
        if rebuilt and verdict == "met":
            verdict = "not judged: peer rebuilt"
        lines.append(
            f"| {load} | {figure} | {_cell(theirs)} | {_cell(ours)} | {_cell(ratios)}x{caveat} | "
            f"{'>=' if higher else '<='} {target}x | {verdict} |"
        )
    return lines


def render(result: dict) -> list[str]:
    rounds = result["rounds"]
    rebuilt, caveat = rebuilt_peer(rounds)
    lines = [
        "## The model class people download: a 1.5B Q4_K_M against llama-server",
        "",
        f"`{os.path.basename(result['gguf'])}` (Qwen2.5-1.5B's shape, random weights, quantized by llama.cpp's "
        f"`llama-quantize`); CPU flags: {result.get('isa', '?')}. Ours with no settings; llama-server: "
        f"`{rounds[0]['llama-server']['start']['command']}`. Memory: resident after load less the 896 MiB "
        "KV pool each holds (ours started with MINIVLLM_KV_CACHE_MB=896 for that figure). " + prompts_line(result.get("prompts")),
        "",
    ]
    if rebuilt:
        lines += [
            f"**llama-server ran {', '.join(rebuilt)} here: its native AMX build crashed starting, so these ratios are "
            "against a slower peer than its native one and no target below counts as met.**",
            "",
        ]
    lines += target_rows(rounds, TARGETS, rebuilt, caveat) + spec_off_rows(rounds, LOADS[0][0], caveat)
    return lines + latency_rows(rounds, LOADS) + [""]


def run(tokenizer, *, rounds: int, results_dir: str) -> dict:
    """Each round's figures for both servers (report.py keeps them in report.json)."""
    from .machine import machine_info

    build(build_that_runs())
    gguf = str(shaped_model())
    result = {
        "gguf": gguf,
        "rounds": [],
        "isa": " ".join(machine_info()["isa_flags"]),
        "prompts": prompts_used((*LOADS, PREFILL)),
    }
    for r in range(rounds):
        result["rounds"].append(one_round(tokenizer, gguf, r, results_dir))
        print(f"large-model round {r + 1} done", flush=True)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    args = p.parse_args(argv)
    from .model_files import load_tokenizer

    os.makedirs(args.results_dir, exist_ok=True)
    result = run(load_tokenizer(), rounds=args.rounds, results_dir=args.results_dir)
    with open(os.path.join(args.results_dir, "peer-large.json"), "w") as out:
        json.dump(result, out, indent=1)
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
