"""Speculative decoding against speculation off and against llama-server's n-gram modes (issue 32).

Each round starts, one after the other: ours with no settings (speculation `auto`), ours with
MINIVLLM_SPECULATIVE=off, and llama-server from the same GGUF with `--spec-type ngram-simple` and
with `--spec-type ngram-mod` (each mode's defaults; the faster one is the peer's figure). Each runs
the same workloads, greedy, `ignore_eos`:
- grounded: passages of 300-600 tokens to repeat with an edit, summarise, extract as JSON or
  refactor (real text: this repository's README and engine code, behind the chat template), 256
  output tokens, at 1 client and at 4;
- chat questions: bench/prompts.py's CHAT_QUESTIONS behind the chat template, 128 output tokens,
  1 client: answers that do not repeat, so little to guess (random words, used before, make a
  model loop, and the n-gram lookup predicts the loop);
- standard: the peer benchmark's 32-client load (8-40 random words in, 32 out);
- grounded, agent: the grounded requests sent to /v1/chat/completions with a coding agent's tools
  offered (tool_choice auto: the tool-call trigger watches every reply), 1 client, ours only: its
  target is the plain grounded row's speed (speculation goes on while the trigger watches).
Our acceptance rate and tokens per verification come from /stats' counters around each workload.
A figure with a failed request is measured again (twice at most); one that still fails is "not
measured", and a verdict needs every round's figure. Where llama-server had to be rebuilt without
its native AMX path (bench/llama_server.py), no target against it counts as met.

On the embedded SmolLM2 and on Qwen2.5-Coder-0.5B-Instruct (the real GGUF `make test` fetches,
tests/support/real_gguf.py; its prompts behind its own chat template) the guesses are a real
model's; the 1.5B shaped model has random weights, so its acceptance says nothing about real text:
its rows measure what a verification costs at that size, and the random and 32-client loads
measure what speculation costs where it cannot help.

    python -m bench.speculative --model embedded --rounds 1     # ~6 min on 2 cores
    python -m bench.speculative --model qwen --rounds 1         # Qwen2.5-Coder-0.5B (real weights), ~10 min
    python -m bench.speculative --model large --rounds 1        # the 1.5B Q4_K_M, ~12 min
    python -m bench.speculative --docs-dir docs/bench           # also docs/bench/raw/speculative.json and the page
    python -m bench.speculative --model qwen --no-peer          # ours only (no llama-server build or runs)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from pathlib import Path

import httpx

from .llama_server import LlamaServer, build, build_that_runs
from .prompts import BenchRequest, chat_requests, make_requests
from .raw import measured_line, publish
from .server import EngineServer

REPO = Path(__file__).resolve().parent.parent
PEER_MODES = ("ngram-simple", "ngram-mod")
TARGETS = {  # (workload, against): ratio of our default's output tok/s
    ("grounded, 1 client", "speculation off"): 2.0,
    ("grounded, 1 client", "llama-server n-gram"): 1.5,
    ("grounded, 4 clients", "speculation off"): 1.4,
    ("chat questions, 1 client", "speculation off"): 0.97,
    ("standard, 32 clients", "speculation off"): 0.97,
    ("grounded, agent, 1 client", "the same without tools"): 0.9,
}
AGENT_ROWS = {"grounded, agent, 1 client": "grounded, 1 client"}  # an agent row -> the row it is held to
# a coding agent's tools, offered on every agent request
AGENT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }
    for name, description, properties in (
        ("read_file", "Reads a file of the repository.", {"path": {"type": "string"}}),
        ("write_file", "Writes a file of the repository.", {"path": {"type": "string"}, "content": {"type": "string"}}),
    )
]
ATTEMPTS = 3  # a workload with a failed request is measured again, at most this many times in all
COUNTERS = ("spec_draft_tokens", "spec_accepted_tokens", "spec_verifications", "spec_verified_tokens")


def passages(tokenizer) -> list[tuple[str, str]]:
    """(kind, text) pieces of 300-600 tokens: README prose and engine code, cut at line ends."""
    sources = [
        ("prose", (REPO / "README.md").read_text()),
        ("code", (REPO / "inference/engine/kv_cache/coordinator.py").read_text()),
        # the frozen log: committed, and never rewritten by a bench run (docs/bench/ is)
        ("prose", (REPO / "docs/performance-log.md").read_text() if (REPO / "docs/performance-log.md").exists() else ""),
        ("code", (REPO / "inference/engine/scheduler.py").read_text()),
    ]
    pieces = []
    for kind, text in sources:
        lines, piece = text.splitlines(keepends=True)[20:], ""
        for line in lines:
            piece += line
            if len(tokenizer.encode(piece)) >= 380:
                break
        if piece.strip():
            pieces.append((kind, piece.strip()))
    return pieces


TASKS = {
    "prose": [
        "Repeat the following text exactly, but write the word 'engine' as 'motor':\n\n{text}",
        "Summarise the following text, quoting its most important sentences word for word:\n\n{text}",
    ],
    "code": [
        "Refactor this code: rename the variable `seq` to `sequence` and change nothing else. Reply with the whole file.\n\n{text}",
        'List every function in this code as JSON, {{"name": ..., "first_line": ...}} each:\n\n{text}',
    ],
}


def grounded_requests(tokenizer, count: int, output_len: int = 256, *, tools: list[dict] | None = None) -> list[BenchRequest]:
    """The grounded tasks behind the chat template; with `tools`, as chat requests offering them."""
    requests = []
    for kind, text in passages(tokenizer):
        for task in TASKS[kind]:
            chat = [{"role": "user", "content": task.format(text=text)}]
            prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            fields = {"messages": chat, "tools": tools, "tool_choice": "auto"} if tools else None
            requests.append(BenchRequest(prompt, len(tokenizer.encode(prompt)), output_len, chat=fields))
    return [requests[i % len(requests)] for i in range(count)]


def workloads(tokenizer, seed: int) -> list[tuple[str, int, list[BenchRequest]]]:
    return [
        ("grounded, 1 client", 1, grounded_requests(tokenizer, 4)),
        ("grounded, 4 clients", 4, grounded_requests(tokenizer, 8)),
        ("chat questions, 1 client", 1, chat_requests(tokenizer, num_prompts=3, output_len=128, seed=seed)),
        ("standard, 32 clients", 32, make_requests(tokenizer, num_prompts=32, input_len="8-40", output_len=32, seed=seed)),
        ("grounded, agent, 1 client", 1, grounded_requests(tokenizer, 4, tools=AGENT_TOOLS)),
    ]


def _counters(base_url: str) -> dict:
    try:
        stats = httpx.get(f"{base_url}/stats", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {name: stats.get(name) or 0 for name in COUNTERS}


def measure(base_url: str, loads, *, ours: bool) -> dict:
    figures = {}
    for name, concurrency, requests in loads:
        for attempt in range(1, ATTEMPTS + 1):
            figure = _measure_once(base_url, name, concurrency, requests, ours=ours)
            if not figure["failed"]:
                break
            print(f"{name}: {figure['failed']} request(s) failed; attempt {attempt}", flush=True)
        else:  # still failing: not measured
            figure = {k: (v if k == "failed" else None) for k, v in figure.items()}
        figure["attempts"] = attempt
        figures[name] = figure
    return figures


def _measure_once(base_url: str, name: str, concurrency: int, requests, *, ours: bool) -> dict:
    from .serve import run_benchmark

    before = _counters(base_url) if ours else {}
    result = asyncio.run(
        run_benchmark(requests, base_url=base_url, concurrency=concurrency, ignore_eos=True, show_progress=False)
    )
    s = result["summary"]
    figure = {"tok/s": s["output_throughput"], "failed": s["failed"], "ITL p50": s["itl_ms"]["p50"]}
    if ours:
        after = _counters(base_url)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
        figure["acceptance"] = delta["spec_accepted_tokens"] / delta["spec_draft_tokens"] if delta["spec_draft_tokens"] else None
        figure["tokens per verification"] = (
            delta["spec_verified_tokens"] / delta["spec_verifications"] if delta["spec_verifications"] else None
        )
    return figure


def one_round(tokenizer, gguf: str | None, r: int, results_dir: str, *, peer: bool = True) -> dict:
    loads = workloads(tokenizer, seed=300 + r)
    model_env = {"MINIVLLM_MODEL": gguf} if gguf else {}
    row = {}
    for label, env in (("ours", {}), ("ours, speculation off", {"MINIVLLM_SPECULATIVE": "off"})):
        log = os.path.join(results_dir, f"spec-{label.replace(', ', '-').replace(' ', '-')}-{r}.log")
        with EngineServer({**model_env, **env}, log_path=log) as server:
            row[label] = measure(server.base_url, loads, ours=True)
            row[label]["command"] = server.command
    if not peer:
        return row
    if gguf is None:
        from .model_files import embedded_gguf

        gguf = str(embedded_gguf())
    plain = [load for load in loads if load[0] not in AGENT_ROWS]  # the agent rows are held to our own
    for mode in PEER_MODES:
        log = os.path.join(results_dir, f"spec-llama-{mode}-{r}.log")
        with LlamaServer(gguf, log_path=log, extra=("--spec-type", mode)) as server:
            row[f"llama-server {mode}"] = measure(server.base_url, plain, ours=False)
            row[f"llama-server {mode}"]["command"] = server.command
            row[f"llama-server {mode}"]["build"] = server.build
    return row


def _fmt(values, digits=2) -> str:
    return ", ".join("–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}" for v in values)


NOT_FIGURES = ("command", "build")  # a server's entries in a round that are not workloads


def peer_builds(rounds: list[dict]) -> set[str]:
    """The llama-server builds the rounds ran ("native" unless rebuilt; a result from before the
    build was recorded says it in its command)."""
    builds = set()
    for r in rounds:
        for mode in PEER_MODES:
            peer = r.get(f"llama-server {mode}")
            if peer is None:
                continue
            builds.add(peer.get("build") or ("native-no-amx" if "(built " in peer.get("command", "") else "native"))
    return builds


def _figure(r: dict, server: str, name: str) -> float | None:
    """A server's tok/s on a workload in round `r` (None: not run or not measured)."""
    return ((r.get(server) or {}).get(name) or {}).get("tok/s")


def _ratios(rounds, name, against) -> list[float]:
    key = "ours, speculation off" if against == "speculation off" else None
    ratios = []
    for r in rounds:
        ours = r["ours"][name]["tok/s"]
        if against == "the same without tools":
            theirs = _figure(r, "ours", AGENT_ROWS[name])
        elif key:
            theirs = r[key][name]["tok/s"]
        else:
            peers = [_figure(r, f"llama-server {m}", name) for m in PEER_MODES]
            theirs = None if any(p is None for p in peers) else max(peers)
        ratios.append(ours / theirs if ours is not None and theirs else math.nan)
    return ratios


def verdict(ratios: list[float], target: float, *, peer_rebuilt: bool = False) -> str:
    """Met only if every round's figure is there and meets it; against a rebuilt llama-server, not judged."""
    if not ratios or any(math.isnan(x) for x in ratios):
        return "not measured"
    met = all(x >= target for x in ratios)
    if met and peer_rebuilt:
        return "not judged: peer rebuilt"
    return "met" if met else "not met"


def render(result: dict) -> list[str]:
    lines = ["## Speculative decoding (issue 32)", ""]
    machine = result.get("machine")
    if machine:
        lines += [measured_line(machine, result.get("command")), ""]
    for model, rounds in result["models"].items():
        if not rounds:
            continue
        names = [name for name in rounds[0]["ours"] if name not in NOT_FIGURES]
        rebuilt = sorted(peer_builds(rounds) - {"native"})
        peer = rounds[0].get("llama-server ngram-simple")
        peer_line = (
            f"llama-server: `{peer['command']}` and the same with `--spec-type ngram-mod`."
            if peer
            else "llama-server not run (`--no-peer`)."
        )
        lines += [
            f"### {model}",
            "",
            f"Ours: `{rounds[0]['ours']['command']}` and the same with MINIVLLM_SPECULATIVE=off; {peer_line}",
            "",
        ]
        if rebuilt:
            lines += [
                f"**llama-server ran {', '.join(rebuilt)} here: its native AMX build crashed starting, so the ratios against "
                "it are against a slower peer than its native one and no target against it counts as met.**",
                "",
            ]
        lines += [
            "| workload | ours tok/s | spec off | llama-server ngram-simple / ngram-mod | vs off | vs llama-server's best | "
            "acceptance | tokens per verification |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name in names:
            ours = [r["ours"][name]["tok/s"] for r in rounds]
            off = [r["ours, speculation off"][name]["tok/s"] for r in rounds]
            simple = [_figure(r, "llama-server ngram-simple", name) for r in rounds]
            mod = [_figure(r, "llama-server ngram-mod", name) for r in rounds]
            caveat = " (peer rebuilt)" if rebuilt else ""
            lines.append(
                f"| {name} | {_fmt(ours, 1)} | {_fmt(off, 1)} | {_fmt(simple, 1)} / {_fmt(mod, 1)} "
                f"| {_fmt(_ratios(rounds, name, 'speculation off'))}x | {_fmt(_ratios(rounds, name, 'llama-server n-gram'))}x{caveat} "
                f"| {_fmt([r['ours'][name]['acceptance'] for r in rounds])} "
                f"| {_fmt([r['ours'][name]['tokens per verification'] for r in rounds])} |"
            )
        lines += ["", "Targets (our default's output tok/s):", ""]
        for (name, against), target in TARGETS.items():
            if name not in names:
                continue
            ratios = _ratios(rounds, name, against)
            judged = verdict(ratios, target, peer_rebuilt=bool(rebuilt) and against.startswith("llama-server"))
            lines.append(f"- {name}, against {against}: {_fmt(ratios)}x (target >= {target}x): {judged}")
        lines.append("")
    return lines


def real_qwen():
    """The real Qwen2.5-Coder-0.5B-Instruct GGUF (fetched once, as `make test` does) and its own
    tokenizer, whose chat template the prompts go behind."""
    from transformers import AutoTokenizer

    from tests.support.real_gguf import QWEN25_CODER

    path = QWEN25_CODER.present() or QWEN25_CODER.fetch()
    return str(path), AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def run(tokenizer, *, models: list[str], rounds: int, results_dir: str, peer: bool = True) -> dict:
    from .machine import machine_info
    from .shaped_model import shaped_model

    if peer:
        build(build_that_runs())
    machine = machine_info()
    result = {"models": {}, "isa": " ".join(machine["isa_flags"]), "machine": machine}
    for model in models:
        model_tokenizer = tokenizer
        if model == "qwen":
            gguf, model_tokenizer = real_qwen()
            title = "Qwen2.5-Coder-0.5B-Instruct GGUF (real weights)"
        else:
            gguf = None if model == "embedded" else str(shaped_model())
            title = "Embedded SmolLM2-135M (real weights)" if gguf is None else "1.5B Q4_K_M, Qwen2.5's shape (random weights)"
        result["models"][title] = []
        for r in range(rounds):
            result["models"][title].append(one_round(model_tokenizer, gguf, r, results_dir, peer=peer))
            print(f"speculative decoding, {model}: round {r + 1} done", flush=True)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("embedded", "qwen", "large", "all"), default="all")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/speculative.json and rewrite the page there")
    p.add_argument("--no-peer", action="store_true", help="ours only: no llama-server build or runs")
    args = p.parse_args(argv)
    from .model_files import load_tokenizer

    os.makedirs(args.results_dir, exist_ok=True)
    models = ["embedded", "qwen", "large"] if args.model == "all" else [args.model]
    result = run(load_tokenizer(), models=models, rounds=args.rounds, results_dir=args.results_dir, peer=not args.no_peer)
    result["command"] = "python -m bench.speculative " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(os.path.join(args.results_dir, "speculative.json"), "w") as out:
        json.dump(result, out, indent=1)
    print("\n".join(render(result)))
    if args.docs_dir:
        publish(args.docs_dir, "speculative", result)


if __name__ == "__main__":
    main()
