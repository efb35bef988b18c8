"""Time outside the model (issue 66): small models on prose against llama-server, and where a
decode step's time goes.

Per model (the embedded SmolLM2-135M Q4_1 and the real Qwen2.5-Coder-0.5B Q4_K_M) and per round,
each server started alone on the same file: ours with no settings (speculation `auto`), ours with
`MINIVLLM_SPECULATIVE=off`, and llama-server's native build. Loads are prose only (the fixed chat
questions behind the chat template, 64 tokens): 1 client, and on the embedded model 8 and 32
clients. Judged per round: the embedded model at one client >= 1.2x llama-server's tok/s, at 32
>= 2x with TTFT p50 <= 1x; the 0.5B at one client >= 1.2x; speculation `auto` >= 0.97x `off` on
every load; ready <= 1.5x on the 0.5B (ours timed after a first start has packed the file's blocks).

The step split: over ours' one-client load with speculation off (every step one token), the engine's decode steps by phase from `/stats`'s
`step_times` (engine/timing/step_times.py: schedule, inputs, forward, sample, outputs,
detokenize, handoff; the warm-up request's steps among them), and "serving": the client's mean inter-token gap less the engine's mean step, which
is the event loop's share (the SSE frames, the GIL they hold) and any wait for the next step.

    python -m bench.step_split --rounds 2 --docs-dir docs/bench   # docs/bench/raw/step_split.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

import httpx

from .llama_server import LlamaServer, build, build_that_runs
from .prompts import CHAT, requests_for
from .raw import write_raw
from .server import EngineServer

LOADS = {"1 client": (1, 16), "8 clients": (8, 32), "32 clients": (32, 96)}  # concurrency, prompts
OUTPUT_TOKENS = "64"
SPEC_OFF = "ours, speculation off"
TARGETS = {  # (model, load, figure): (ratio to llama-server, higher is better)
    ("embedded", "1 client", "tok/s"): (1.2, True),
    ("embedded", "32 clients", "tok/s"): (2.0, True),
    ("embedded", "32 clients", "TTFT p50"): (1.0, False),
    ("qwen2.5-coder-0.5b", "1 client", "tok/s"): (1.2, True),
    ("qwen2.5-coder-0.5b", "ready", "s"): (1.5, False),
}
SPEC_TARGET = 0.97  # auto / off, tok/s, on every load


def models() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (GGUF path, the loads it is measured on)."""
    from tests.support.real_gguf import QWEN25_CODER

    from .model_files import embedded_gguf

    coder = QWEN25_CODER.present() or QWEN25_CODER.fetch()
    return {"embedded": (embedded_gguf(), tuple(LOADS)), "qwen2.5-coder-0.5b": (str(coder), ("1 client",))}


def measure_load(base_url: str, tokenizer, load: str, seed: int) -> dict:
    from .serve import run_benchmark

    concurrency, prompts = LOADS[load]
    requests = requests_for(tokenizer, num_prompts=prompts, input_len=CHAT, output_len=OUTPUT_TOKENS, seed=seed)
    result = asyncio.run(
        run_benchmark(
            requests, base_url=base_url, concurrency=concurrency, ignore_eos=True, seed=seed, show_progress=False, warmup=True
        )
    )
    s = result["summary"]
    return {
        "tok/s": s["output_throughput"],
        "TTFT p50": s["ttft_ms"]["p50"],
        "ITL mean": s["itl_ms"]["mean"],
        "ITL p50": s["itl_ms"]["p50"],
        "failed": s["failed"],
    }


def step_times(base_url: str) -> dict:
    return httpx.get(f"{base_url}/stats", timeout=10).json().get("step_times") or {}


def split(before: dict, after: dict, itl_mean_ms: float | None) -> dict:
    """Mean ms per decode step of each phase between two `/stats` readings, and the serving rest."""
    steps = after["steps"] - before["steps"]
    if steps <= 0:
        return {}
    phases = {p: 1000 * (after["totals_s"][p] - before["totals_s"][p]) / steps for p in after["totals_s"]}
    engine = sum(phases.values())
    return {
        "steps": steps,
        **{f"{p} ms": round(ms, 3) for p, ms in phases.items()},
        "engine step ms": round(engine, 3),
        "overhead ms": round(engine - phases["forward"], 3),
        "serving ms": round(itl_mean_ms - engine, 3) if itl_mean_ms is not None else None,
    }


def ours(gguf: str, loads, tokenizer, env: dict, log: str, seed: int) -> dict:
    with EngineServer({"MINIVLLM_MODEL": gguf, **env}, log_path=log) as server:
        figures = {"ready s": server.ready_s, "command": server.command}
        for load in loads:
            before = step_times(server.base_url)
            figures[load] = measure_load(server.base_url, tokenizer, load, seed)
            if load == "1 client" and env.get("MINIVLLM_SPECULATIVE") == "off":
                figures["step split"] = split(before, step_times(server.base_url), figures[load]["ITL mean"])
        return figures


def peer(gguf: str, loads, tokenizer, log: str, seed: int) -> dict:
    with LlamaServer(gguf, log_path=log) as server:
        figures = {"ready s": server.ready_s, "command": server.command}
        for load in loads:
            figures[load] = measure_load(server.base_url, tokenizer, load, seed)
        return figures


def one_round(name: str, gguf: str, loads, r: int, results_dir: str) -> dict:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    log = lambda side: os.path.join(results_dir, f"split-{name}-{side}-{r}.log")  # noqa: E731
    seed = 300 + r
    return {
        "ours": ours(gguf, loads, tokenizer, {}, log("ours"), seed),
        SPEC_OFF: ours(gguf, loads, tokenizer, {"MINIVLLM_SPECULATIVE": "off"}, log("ours-off"), seed),
        "llama-server": peer(gguf, loads, tokenizer, log("llama"), seed),
    }


def verdicts(result: dict) -> list[str]:
    """One line per judged figure: each round's ratio and met / NOT met (every round must meet it)."""
    lines = []
    for (name, load, figure), (target, higher) in TARGETS.items():
        rounds = result["models"].get(name)
        if not rounds:
            continue
        if load == "ready":
            ratios = [r["ours"]["ready s"] / r["llama-server"]["ready s"] for r in rounds]
        else:
            ratios = [r["ours"][load][figure] / r["llama-server"][load][figure] for r in rounds]
        ok = all(x >= target if higher else x <= target for x in ratios)
        sign = ">=" if higher else "<="
        shown = ", ".join(f"{x:.2f}x" for x in ratios)
        lines.append(f"{name}, {load}, {figure}: {shown} (target {sign} {target}x: {'met' if ok else 'NOT met'})")
    for name, rounds in result["models"].items():
        for load in rounds[0]["ours"]:
            if load not in LOADS:
                continue
            ratios = [r["ours"][load]["tok/s"] / r[SPEC_OFF][load]["tok/s"] for r in rounds]
            ok = all(x >= SPEC_TARGET for x in ratios)
            shown = ", ".join(f"{x:.2f}x" for x in ratios)
            lines.append(f"{name}, {load}, auto / off: {shown} (target >= {SPEC_TARGET}x: {'met' if ok else 'NOT met'})")
    return lines


def main(argv=None) -> None:
    from .machine import machine_info

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--models", default="embedded,qwen2.5-coder-0.5b")
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/step_split.json")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    build(build_that_runs())
    chosen = {name: spec for name, spec in models().items() if name in args.models.split(",")}
    for gguf, _ in chosen.values():  # a start that packs the file's blocks once: ready is timed on the starts after
        with EngineServer({"MINIVLLM_MODEL": gguf}, log_path=os.path.join(args.results_dir, "split-first-start.log")):
            pass
    command = f"python -m bench.step_split --rounds {args.rounds} --models {args.models}" + (
        f" --docs-dir {args.docs_dir}" if args.docs_dir else ""
    )
    result = {"machine": machine_info(), "command": command, "models": {name: [] for name in chosen}}
    for r in range(args.rounds):  # rounds outermost: a machine's slow minute lands on every side alike
        for name, (gguf, loads) in chosen.items():
            result["models"][name].append(one_round(name, gguf, loads, r, args.results_dir))
            measured = result["models"][name][-1]
            print(name, json.dumps(measured[SPEC_OFF].get("step split", {})), flush=True)
            for side, figures in measured.items():
                shown = {load: (round(f["tok/s"], 1), round(f["TTFT p50"], 1)) for load, f in figures.items() if load in LOADS}
                print(f"  {side}: ready {figures['ready s']:.2f} s; tok/s, TTFT p50 ms: {shown}", flush=True)
    if args.docs_dir:
        print(f"wrote {write_raw(args.docs_dir, 'step_split', result)}")
    print("\n".join(verdicts(result)))


if __name__ == "__main__":
    main()
