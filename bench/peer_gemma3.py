"""Gemma 3 270M Q4_K_M (the real file `make test` fetches, tests/support/real_gguf.py) served by
our defaults and by llama.cpp's llama-server from the same file, one after the other in each
round (ours first), each figure a ratio to llama-server's in the same round and judged against
issue 44's targets (the Qwen2 1.5B rows' targets, bench/peer_large.py).

Loads: one client (the chat questions as plain prompts: the base file has no chat template, so
both servers get them on /v1/completions), 8 and 32 clients of random words, a 2,000-token prompt
(longer than the 512-token window: 15 of 18 layers attend to their last 512 keys only), ready time
and resident memory after load. Memory at a 16k-token context: each server given a 16,384-token
context and one ~15,000-token prompt, then its resident memory; llama-server keeps only the
window's K/V on the sliding layers (its SWA cache), ours keeps every layer's whole context (the
sliding-window cache is not built yet: docs/models.md), so this is the row to watch.

    python -m bench.peer_gemma3                # one round, ~7 min on 2 cores; prints the table
    python -m bench.peer_gemma3 --docs-dir docs/bench   # also docs/bench/raw/gemma3.json and the page rewritten
"""

from __future__ import annotations

import argparse
import json
import os

import httpx

from .llama_server import LlamaServer, build, build_that_runs
from .peer import SPEC_OFF, _measure, prompts_used
from .peer_large import measure_spec_off, rebuilt_peer, spec_off_rows, target_rows, with_prefill_rate
from .prompts import CHAT, make_requests
from .raw import measured_line, publish
from .server import EngineServer

LOADS = (  # name, concurrency, prompts, input tokens (CHAT: chat questions), output tokens
    ("1 client", 1, 4, CHAT, "32"),
    ("8 clients", 8, 16, "8-40", "32"),
    ("32 clients", 32, 32, "8-40", "32"),
)
PREFILL = ("2,000-token prompt", 1, 2, "2000", "1")
LONG_CONTEXT = 16384
LONG_PROMPT = 15000
TARGETS = {  # (load, figure): (target ratio to llama-server, higher is better)
    ("1 client", "tok/s"): (1.3, True),
    ("8 clients", "tok/s"): (1.5, True),
    ("32 clients", "tok/s"): (2.0, True),
    ("2,000-token prompt", "prefill tok/s"): (1.5, True),
    ("start", "ready s"): (1.5, False),
    ("start", "resident MB after load"): (1.25, False),
    ("16k-token context", "resident MB"): (1.0, False),
}


def gguf_path() -> str:
    from tests.support import real_gguf

    file = real_gguf.present() or real_gguf.fetch()
    return str(file)


def load_tokenizer(gguf: str):
    from inference.engine.gguf.checkpoint import GGUFCheckpoint

    return GGUFCheckpoint.open(gguf).tokenizer


def long_context_mb(base_url: str, tokenizer, resident) -> float | None:
    """Resident memory once one ~15,000-token prompt sits in the context (None if it failed)."""
    [request] = make_requests(tokenizer, num_prompts=1, input_len=LONG_PROMPT, output_len=1, seed=7)
    body = {"prompt": request.prompt, "max_tokens": 1, "temperature": 0}
    reply = httpx.post(f"{base_url}/v1/completions", json=body, timeout=600)
    return resident() if reply.status_code == 200 else None


def one_round(tokenizer, gguf: str, r: int, results_dir: str) -> dict:
    row = {}
    log = lambda name: os.path.join(results_dir, f"gemma3-{name}-{r}.log")  # noqa: E731
    with EngineServer({"MINIVLLM_MODEL": gguf}, log_path=log("ours")) as ours:
        row["ours"] = {"start": {"ready s": ours.ready_s, "command": ours.command}}
        row["ours"]["start"]["resident MB after load"] = ours.resident_after_load_mb()
        row["ours"].update({load[0]: _measure(ours.base_url, tokenizer, load, seed=300 + r) for load in LOADS})
        row["ours"][PREFILL[0]] = with_prefill_rate(_measure(ours.base_url, tokenizer, PREFILL, seed=300 + r))
    row[SPEC_OFF] = measure_spec_off({"MINIVLLM_MODEL": gguf}, tokenizer, LOADS[0], 300 + r, log("ours-spec-off"))
    env = {"MINIVLLM_MODEL": gguf, "MINIVLLM_MAX_MODEL_LEN": str(LONG_CONTEXT), "MINIVLLM_MAX_NUM_SEQS": "1"}
    with EngineServer(env, log_path=log("ours-16k")) as ours:
        row["ours"]["16k-token context"] = {"resident MB": long_context_mb(ours.base_url, tokenizer, ours.resident_mb)}
    with LlamaServer(gguf, log_path=log("llama")) as peer:
        row["llama-server"] = {"start": {"ready s": peer.ready_s, "command": peer.command, "build": peer.build}}
        row["llama-server"]["start"]["resident MB after load"] = peer.resident_after_load_mb()
        row["llama-server"].update({load[0]: _measure(peer.base_url, tokenizer, load, seed=300 + r) for load in LOADS})
    with LlamaServer(gguf, slots=1, context=8192, log_path=log("llama-prefill")) as peer:
        row["llama-server"][PREFILL[0]] = with_prefill_rate(_measure(peer.base_url, tokenizer, PREFILL, seed=300 + r))
    with LlamaServer(gguf, slots=1, context=LONG_CONTEXT, log_path=log("llama-16k")) as peer:
        row["llama-server"]["16k-token context"] = {"resident MB": long_context_mb(peer.base_url, tokenizer, peer.resident_mb)}
    return row


def render(result: dict) -> list[str]:
    rounds = result["rounds"]
    rebuilt, caveat = rebuilt_peer(rounds)
    lines = [
        "## Gemma 3 270M Q4_K_M (real weights) against llama-server",
        "",
        f"`{os.path.basename(result['gguf'])}` (llama.cpp's own conversion; sliding window 512 on 15 of 18 layers); "
        f"CPU flags: {result.get('isa', '?')}. Ours with no settings; llama-server: "
        f"`{rounds[0]['llama-server']['start']['command']}`. The 16k row: each server given a {LONG_CONTEXT:,}-token "
        f"context and one {LONG_PROMPT:,}-token prompt, then its resident memory. One client: bench/prompts.py's chat "
        "questions as plain prompts (the file has no chat template), ours with speculation on (our default) and off "
        "(the base model's replies repeat, which guessing turns into speed); the other loads: seeded random words.",
        "",
        measured_line(result.get("machine") or {}, result.get("command")),
        "",
    ]
    if rebuilt:
        lines += [f"**llama-server ran {', '.join(rebuilt)} here, not its native build: no target below counts as met.**", ""]
    lines += target_rows(rounds, TARGETS, rebuilt, caveat) + spec_off_rows(rounds, LOADS[0][0], caveat)
    return lines + [""]


def run(*, rounds: int, results_dir: str) -> dict:
    """Each round's figures for both servers (report.py keeps them in report.json)."""
    from .machine import machine_info

    build(build_that_runs())
    gguf = gguf_path()
    tokenizer = load_tokenizer(gguf)
    machine = machine_info()
    result = {
        "gguf": gguf,
        "rounds": [],
        "machine": machine,
        "command": "python -m bench.peer_gemma3",
        "isa": " ".join(machine["isa_flags"]),
        "prompts": prompts_used((*LOADS, PREFILL)),
    }
    for r in range(rounds):
        result["rounds"].append(one_round(tokenizer, gguf, r, results_dir))
        print(f"gemma3 round {r + 1} done", flush=True)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/gemma3.json and rewrite the page there")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    result = run(rounds=args.rounds, results_dir=args.results_dir)
    result["command"] = "python -m bench.peer_gemma3" + (f" --rounds {args.rounds}" if args.rounds != 1 else "")
    with open(os.path.join(args.results_dir, "peer-gemma3.json"), "w") as out:
        json.dump(result, out, indent=1)
    if args.docs_dir:
        publish(args.docs_dir, "gemma3", result)
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
