"""Speculative decoding against speculation off and against llama-server's n-gram modes (issue 32).

Each round starts, one after the other: ours with no settings (speculation `auto`), ours with
MINIVLLM_SPECULATIVE=off, and llama-server from the same GGUF with `--spec-type ngram-simple` and
with `--spec-type ngram-mod` (each mode's defaults; the faster one is the peer's figure). Each runs
the same workloads, greedy, `ignore_eos`:
- grounded: passages of 300-600 tokens to repeat with an edit, summarise, extract as JSON or
  refactor (real text: this repository's README and engine code, behind the chat template), 256
  output tokens, at 1 client and at 4;
- random words: a prompt of random words to continue (nothing to guess), 1 client;
- standard: the peer benchmark's 32-client load (8-40 random words in, 32 out).
Our acceptance rate and tokens per verification come from /stats' counters around each workload.

On the embedded SmolLM2 the guesses are a real model's; the 1.5B shaped model has random weights,
so its acceptance says nothing about real text: its rows measure what a verification costs at that
size, and the random and 32-client loads measure what speculation costs where it cannot help.

    python -m bench.speculative --model embedded --rounds 1     # ~6 min on 2 cores
    python -m bench.speculative --model large --rounds 1        # the 1.5B Q4_K_M, ~12 min
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
from pathlib import Path

import httpx

from .llama_server import LlamaServer, build, build_that_runs
from .prompts import BenchRequest, make_requests
from .server import EngineServer

REPO = Path(__file__).resolve().parent.parent
PEER_MODES = ("ngram-simple", "ngram-mod")
TARGETS = {  # (workload, against): ratio of our default's output tok/s
    ("grounded, 1 client", "speculation off"): 2.0,
    ("grounded, 1 client", "llama-server n-gram"): 1.5,
    ("grounded, 4 clients", "speculation off"): 1.4,
    ("random words, 1 client", "speculation off"): 0.97,
    ("standard, 32 clients", "speculation off"): 0.97,
}
COUNTERS = ("spec_draft_tokens", "spec_accepted_tokens", "spec_verifications", "spec_verified_tokens")


def passages(tokenizer) -> list[tuple[str, str]]:
    """(kind, text) pieces of 300-600 tokens: README prose and engine code, cut at line ends."""
    sources = [
        ("prose", (REPO / "README.md").read_text()),
        ("code", (REPO / "inference/engine/block_manager.py").read_text()),
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


def grounded_requests(tokenizer, count: int, output_len: int = 256) -> list[BenchRequest]:
    requests = []
    for kind, text in passages(tokenizer):
        for task in TASKS[kind]:
            chat = [{"role": "user", "content": task.format(text=text)}]
            prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            requests.append(BenchRequest(prompt=prompt, prompt_len=len(tokenizer.encode(prompt)), output_len=output_len))
    return [requests[i % len(requests)] for i in range(count)]


def workloads(tokenizer, seed: int) -> list[tuple[str, int, list[BenchRequest]]]:
    return [
        ("grounded, 1 client", 1, grounded_requests(tokenizer, 4)),
        ("grounded, 4 clients", 4, grounded_requests(tokenizer, 8)),
        ("random words, 1 client", 1, make_requests(tokenizer, num_prompts=2, input_len=64, output_len=256, seed=seed)),
        ("standard, 32 clients", 32, make_requests(tokenizer, num_prompts=32, input_len="8-40", output_len=32, seed=seed)),
    ]


def _counters(base_url: str) -> dict:
    try:
        stats = httpx.get(f"{base_url}/stats", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {name: stats.get(name) or 0 for name in COUNTERS}


def measure(base_url: str, loads, *, ours: bool) -> dict:
    from .serve import run_benchmark

    figures = {}
    for name, concurrency, requests in loads:
        before = _counters(base_url) if ours else {}
        result = asyncio.run(
            run_benchmark(requests, base_url=base_url, concurrency=concurrency, ignore_eos=True, show_progress=False)
        )
        s = result["summary"]
        figure = {"tok/s": s["output_throughput"], "failed": s["failed"], "ITL p50": s["itl_ms"]["p50"]}
        if ours:
            after = _counters(base_url)
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
            figure["acceptance"] = (
                delta["spec_accepted_tokens"] / delta["spec_draft_tokens"] if delta["spec_draft_tokens"] else None
            )
            figure["tokens per verification"] = (
                delta["spec_verified_tokens"] / delta["spec_verifications"] if delta["spec_verifications"] else None
            )
        figures[name] = figure
    return figures


def one_round(tokenizer, gguf: str | None, r: int, results_dir: str) -> dict:
    loads = workloads(tokenizer, seed=300 + r)
    model_env = {"MINIVLLM_MODEL": gguf} if gguf else {}
    row = {}
    for label, env in (("ours", {}), ("ours, speculation off", {"MINIVLLM_SPECULATIVE": "off"})):
        log = os.path.join(results_dir, f"spec-{label.replace(', ', '-').replace(' ', '-')}-{r}.log")
        with EngineServer({**model_env, **env}, log_path=log) as server:
            row[label] = measure(server.base_url, loads, ours=True)
            row[label]["command"] = server.command
    if gguf is None:
        from .model_files import embedded_gguf

        gguf = str(embedded_gguf())
    for mode in PEER_MODES:
        log = os.path.join(results_dir, f"spec-llama-{mode}-{r}.log")
        with LlamaServer(gguf, log_path=log, extra=("--spec-type", mode)) as peer:
            row[f"llama-server {mode}"] = measure(peer.base_url, loads, ours=False)
            row[f"llama-server {mode}"]["command"] = peer.command
    return row


def _fmt(values, digits=2) -> str:
    return ", ".join("–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}" for v in values)


def render(result: dict) -> list[str]:
    lines = ["## Speculative decoding (issue 32)", ""]
    for model, rounds in result["models"].items():
        if not rounds:
            continue
        names = [name for name in rounds[0]["ours"] if name != "command"]
        lines += [
            f"### {model}",
            "",
            f"Ours: `{rounds[0]['ours']['command']}` and the same with MINIVLLM_SPECULATIVE=off; llama-server: "
            f"`{rounds[0]['llama-server ngram-simple']['command']}` and the same with `--spec-type ngram-mod`.",
            "",
            "| workload | ours tok/s | spec off | llama-server ngram-simple / ngram-mod | vs off | vs llama-server's best | "
            "acceptance | tokens per verification |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name in names:
            ours = [r["ours"][name]["tok/s"] for r in rounds]
            off = [r["ours, speculation off"][name]["tok/s"] for r in rounds]
            simple = [r["llama-server ngram-simple"][name]["tok/s"] for r in rounds]
            mod = [r["llama-server ngram-mod"][name]["tok/s"] for r in rounds]
            best = [max(a or 0, b or 0) or None for a, b in zip(simple, mod)]
            vs_off = [o / f if o and f else None for o, f in zip(ours, off)]
            vs_peer = [o / p if o and p else None for o, p in zip(ours, best)]
            lines.append(
                f"| {name} | {_fmt(ours, 1)} | {_fmt(off, 1)} | {_fmt(simple, 1)} / {_fmt(mod, 1)} | {_fmt(vs_off)}x "
                f"| {_fmt(vs_peer)}x | {_fmt([r['ours'][name]['acceptance'] for r in rounds])} "
                f"| {_fmt([r['ours'][name]['tokens per verification'] for r in rounds])} |"
            )
        lines += ["", "Targets (our default's output tok/s):", ""]
        for (name, against), target in TARGETS.items():
            if name not in names:
                continue
            key = "ours, speculation off" if against == "speculation off" else None
            ratios = []
            for r in rounds:
                theirs = r[key][name]["tok/s"] if key else max(r[f"llama-server {m}"][name]["tok/s"] or 0 for m in PEER_MODES)
                ratios.append(r["ours"][name]["tok/s"] / theirs if theirs else math.nan)
            verdict = "met" if all(x >= target for x in ratios) else "not met"
            lines.append(f"- {name}, against {against}: {_fmt(ratios)}x (target >= {target}x): {verdict}")
        lines.append("")
    return lines


def run(tokenizer, *, models: list[str], rounds: int, results_dir: str) -> dict:
    from .machine import machine_info
    from .shaped_model import shaped_model

    build(build_that_runs())
    result = {"models": {}, "isa": " ".join(machine_info()["isa_flags"])}
    for model in models:
        gguf = None if model == "embedded" else str(shaped_model())
        title = "Embedded SmolLM2-135M (real weights)" if gguf is None else "1.5B Q4_K_M, Qwen2.5's shape (random weights)"
        result["models"][title] = []
        for r in range(rounds):
            result["models"][title].append(one_round(tokenizer, gguf, r, results_dir))
            print(f"speculative decoding, {model}: round {r + 1} done", flush=True)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("embedded", "large", "both"), default="both")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    args = p.parse_args(argv)
    from .model_files import load_tokenizer

    os.makedirs(args.results_dir, exist_ok=True)
    models = ["embedded", "large"] if args.model == "both" else [args.model]
    result = run(load_tokenizer(), models=models, rounds=args.rounds, results_dir=args.results_dir)
    with open(os.path.join(args.results_dir, "speculative.json"), "w") as out:
        json.dump(result, out, indent=1)
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
