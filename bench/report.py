"""Runs the sweep and writes the generated page and its raw results under docs/bench/.

Starts our server (Daphne, `MINIVLLM_AUTOSTART=1`) unless `--base-url` points at one already
running, measures it over concurrency 1..32 for a uniform and a mixed output length, stops it,
then measures it against llama.cpp's `llama-server` (built once, bench/llama_server.py) in
alternating rounds (bench/peer.py, bench/peer_large.py, bench/peer_gemma3.py, bench/peer_moe.py,
bench/speculative.py), teacher-forced agreement with float32 (bench/numerics.py), constrained decoding's cost and JSON endings (bench/structured.py,
bench/json_endings.py), then runs the HF baselines over the same prompts. The full sweep is
sized for ~40 minutes on the 2-core CPU; `--quick` is a few minutes more than the peer's rounds.

What it writes, all in the same run: docs/bench/report.json (the sweep, the llama-server rounds),
docs/bench/raw/<name>.json (bench/raw.py: speculative decoding, structured outputs, JSON endings),
and from those files only, docs/bench/benchmarks.md, throughput.png and latency.png. A part skipped
(`--skip-...`) leaves its earlier raw result, whose section states its own date and machine.

    python -m bench.report            # full sweep
    python -m bench.report --quick    # concurrency 1 and 8, fewer prompts
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from .raw import RAW_SECTIONS, load_raw, save_raw
from .sweep import Plan, Workload, run_engine_phase, run_hf_phase

DEFAULT_SERVER_ENV: dict[str, str] = {}  # the defaults a user gets (32 slots, the planned KV pool, MINIVLLM_QUANT=auto)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="concurrency 1,8; 4 prompts minimum, 1 per slot; 2 one-at-a-time")
    p.add_argument("--concurrency", default=None, help="comma list (default 1,4,8,16,32)")
    p.add_argument("--input-len", default="128")
    p.add_argument("--output-len", default="64", help="the uniform workload's output length")
    p.add_argument("--mixed-output-len", default="16-256", help="the mixed workload's output length range")
    p.add_argument("--workloads", default="uniform,mixed")
    p.add_argument("--prompts-per-slot", type=int, default=None)
    p.add_argument("--min-prompts", type=int, default=None)
    p.add_argument("--one-at-a-time-prompts", type=int, default=None)
    p.add_argument("--dtypes", default="float32,bfloat16", help="HF baseline dtypes")
    p.add_argument("--skip-baselines", action="store_true")
    p.add_argument("--base-url", default=None, help="benchmark this running server instead of starting ours")
    p.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE", help="extra env for our server")
    p.add_argument(
        "--latency-server-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also start a second server with this extra env (e.g. MINIVLLM_QUANT=int4) for one client on the uniform "
        "workload: the single-stream latency mode, judged for the one-client target",
    )
    p.add_argument("--skip-peer", action="store_true", help="do not build and measure llama.cpp's llama-server beside ours")
    p.add_argument("--peer-rounds", type=int, default=2, help="alternating rounds of ours and llama-server")
    p.add_argument(
        "--skip-large", action="store_true", help="do not measure the 1.5B Q4_K_M against llama-server (bench/peer_large.py)"
    )
    p.add_argument(
        "--skip-gemma3", action="store_true", help="do not measure Gemma 3 270M against llama-server (bench/peer_gemma3.py)"
    )
    p.add_argument(
        "--skip-moe",
        action="store_true",
        help="do not measure the Qwen3-30B-A3B-shaped MoE (8 layers) against llama-server (bench/peer_moe.py)",
    )
    p.add_argument(
        "--skip-numerics",
        action="store_true",
        help="do not measure teacher-forced agreement with float32 on the real test files (bench/numerics.py)",
    )
    p.add_argument(
        "--skip-speculative",
        action="store_true",
        help="do not measure speculative decoding against speculation off and llama-server's n-gram modes (bench/speculative.py)",
    )
    p.add_argument(
        "--skip-models",
        action="store_true",
        help="do not measure switching between a folder's models against llama-server's router (bench/models_switch.py)",
    )
    p.add_argument(
        "--skip-structured",
        action="store_true",
        help="do not measure a JSON schema's cost and JSON endings (bench/structured.py, bench/json_endings.py)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--docs-dir", default="docs/bench")
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--render-only",
        default=None,
        metavar="REPORT_JSON",
        help="rewrite the page and plots from a saved report.json and the raw results in --docs-dir, measuring nothing",
    )
    return p.parse_args(argv)


def _given(value, default):
    return default if value is None else value


def make_plan(args) -> Plan:
    quick = args.quick
    lengths = {"uniform": args.output_len, "mixed": args.mixed_output_len}
    workloads = [Workload(name, args.input_len, lengths[name]) for name in args.workloads.split(",")]
    default_cs = "1,8" if quick else "1,4,8,16,32"
    return Plan(
        workloads=workloads,
        concurrencies=[int(c) for c in (args.concurrency or default_cs).split(",")],
        prompts_per_slot=_given(args.prompts_per_slot, 1 if quick else 2),
        min_prompts=_given(args.min_prompts, 4 if quick else 8),
        one_at_a_time_prompts=_given(args.one_at_a_time_prompts, 2 if quick else 8),
        dtypes=[d for d in args.dtypes.split(",") if d],
        seed=args.seed,
    )


def plan_json(plan: Plan) -> dict:
    return {
        "concurrencies": plan.concurrencies,
        "workloads": [vars(w) for w in plan.workloads],
        "seed": plan.seed,
        "prompts_per_slot": plan.prompts_per_slot,
        "min_prompts": plan.min_prompts,
        "one_at_a_time_prompts": plan.one_at_a_time_prompts,
        "dtypes": plan.dtypes,
    }


def _server_env(*extra: list[str]) -> dict:
    env = dict(DEFAULT_SERVER_ENV)
    for items in extra:
        env.update(item.split("=", 1) for item in items)
    return env


def _server_stats(server) -> dict:
    return {k: server.stats.get(k) for k in ("model", "device", "dtype", "num_slots")}


def engine_entries(args, plan, tokenizer, results_dir) -> tuple[list[dict], dict, str | None]:
    """(entries, server stats, server command) from our own server, or from `--base-url`."""
    progress = not args.no_progress
    if args.base_url:
        return run_engine_phase(plan, tokenizer, args.base_url, results_dir=results_dir, show_progress=progress), {}, None
    from .server import EngineServer

    with EngineServer(_server_env(args.server_env), log_path=os.path.join(results_dir, "server.log")) as server:
        print(f"server ready at {server.base_url}: {server.stats.get('dtype')} on {server.stats.get('device')}", flush=True)
        entries = run_engine_phase(plan, tokenizer, server.base_url, results_dir=results_dir, show_progress=progress)
        return entries, {**_server_stats(server), "env": " ".join(args.server_env)}, server.command


def latency_entries(args, plan, tokenizer, results_dir) -> tuple[list[dict], dict | None]:
    """One client on the uniform workload against a server started with `--latency-server-env`."""
    if not args.latency_server_env:
        return [], None
    if not any(w.name == "uniform" for w in plan.workloads) or 1 not in plan.concurrencies:
        print("--latency-server-env: the plan has no uniform workload at concurrency 1; no latency server", flush=True)
        return [], None
    from .server import EngineServer

    env = _server_env(args.server_env, args.latency_server_env)
    with EngineServer(env, log_path=os.path.join(results_dir, "latency-server.log")) as server:
        entries = run_engine_phase(
            plan,
            tokenizer,
            server.base_url,
            results_dir=results_dir,
            show_progress=not args.no_progress,
            mode="latency",
            only={("uniform", 1)},
        )
        info = {**_server_stats(server), "env": " ".join(args.latency_server_env), "command": server.command}
        return entries, info


def main(argv=None) -> dict:
    from .machine import machine_info
    from .model_files import load_tokenizer

    args = parse_args(argv)
    if args.base_url and args.latency_server_env:
        raise SystemExit("--latency-server-env starts a server of ours; it cannot go with --base-url")
    if args.render_only:
        with open(args.render_only) as f:
            report = json.load(f)
        # a run's bench/results/report.json keeps its raw results inside; split them out as the run did
        raw = {name: result for name in RAW_SECTIONS if (result := report.pop(name, None))}
        write_docs(report, args.docs_dir, raw)
        return report
    plan = make_plan(args)
    os.makedirs(args.results_dir, exist_ok=True)
    os.makedirs(args.docs_dir, exist_ok=True)
    started = time.monotonic()
    machine = machine_info()
    tokenizer = load_tokenizer()
    entries, server, server_command = engine_entries(args, plan, tokenizer, args.results_dir)
    latency, latency_server = latency_entries(args, plan, tokenizer, args.results_dir)
    entries += latency
    peer = None
    if not args.skip_peer and not args.base_url:
        from .model_files import embedded_gguf
        from .peer import run_rounds

        peer = run_rounds(
            tokenizer,
            embedded_gguf(),
            rounds=args.peer_rounds,
            server_env=_server_env(args.server_env),
            results_dir=args.results_dir,
        )
    large = None
    if not args.skip_peer and not args.skip_large and not args.base_url:
        from . import peer_large

        large = peer_large.run(tokenizer, rounds=1 if args.quick else args.peer_rounds, results_dir=args.results_dir)
    raw = {}
    if not args.skip_peer and not args.skip_gemma3 and not args.base_url:
        from . import peer_gemma3

        raw["gemma3"] = peer_gemma3.run(rounds=1, results_dir=args.results_dir)
    if not args.skip_peer and not args.skip_moe and not args.base_url:
        from . import peer_moe

        raw["moe"] = peer_moe.run(rounds=1, results_dir=args.results_dir, large=large)
    if not args.skip_peer and not args.skip_numerics and not args.base_url:
        from . import numerics

        raw["numerics"] = numerics.run(results_dir=args.results_dir)
    if not args.skip_peer and not args.skip_speculative and not args.base_url:
        from . import speculative as spec_bench

        models = ["embedded", "qwen"] if args.quick or args.skip_large else ["embedded", "qwen", "large"]
        raw["speculative"] = spec_bench.run(tokenizer, models=models, rounds=1, results_dir=args.results_dir)
    if not args.skip_peer and not args.skip_models and not args.base_url:
        from . import models_switch

        raw["models"] = models_switch.run(rounds=1, results_dir=args.results_dir)
    if not args.skip_structured and not args.base_url:
        from . import json_endings, structured

        env = _server_env(args.server_env)
        raw["structured"] = structured.run(rounds=1 if args.quick else 3, server_env=env)
        raw["json_endings"] = json_endings.run(requests=10 if args.quick else 50, server_env=env)
    command = "python -m bench.report " + shlex.join(sys.argv[1:] if argv is None else argv)
    for result in raw.values():
        result["command"] = command
    if not args.skip_baselines:
        entries += run_hf_phase(plan, tokenizer, results_dir=args.results_dir, show_progress=not args.no_progress)
    machine["load_average_at_end"] = os.getloadavg()
    report = {
        "command": command,
        "machine": machine,
        "server": server,
        "server_command": server_command,
        "latency_server": latency_server,
        "peer": peer,
        "peer_large": large,
        "plan": plan_json(plan),
        "entries": entries,
        "elapsed_s": time.monotonic() - started,
    }
    with open(os.path.join(args.results_dir, "report.json"), "w") as f:
        json.dump({**report, **raw}, f, indent=1)
    write_docs(report, args.docs_dir, raw)
    print(f"wrote {args.docs_dir}/benchmarks.md, its raw results and plots in {report['elapsed_s'] / 60:.1f} min", flush=True)
    return report


def write_docs(report: dict, docs_dir: str, raw: dict[str, dict] | None = None) -> None:
    """The run's raw results (report.json, raw/<name>.json), then the page and plots made from them."""
    from .plots import latency_plot, throughput_plot

    os.makedirs(docs_dir, exist_ok=True)
    with open(os.path.join(docs_dir, "report.json"), "w") as f:  # the raw figures, committed beside the tables
        json.dump(report, f, indent=1)
    for name, result in (raw or {}).items():
        save_raw(docs_dir, name, result)
    write_page(docs_dir)
    throughput_plot(report, os.path.join(docs_dir, "throughput.png"))
    latency_plot(report, os.path.join(docs_dir, "latency.png"))


def write_page(docs_dir: str) -> str:
    """docs_dir/benchmarks.md from docs_dir/report.json and docs_dir/raw/*.json, nothing else."""
    from .tables import render

    with open(os.path.join(docs_dir, "report.json")) as f:
        report = json.load(f)
    path = os.path.join(docs_dir, "benchmarks.md")
    with open(path, "w") as f:
        f.write(render(report, load_raw(docs_dir)))
    return path


if __name__ == "__main__":
    main()
