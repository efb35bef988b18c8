"""The report's plan and its two phases: our server over HTTP, then HF `generate` in-process.

Every configuration has its own seed, so no two runs share prompts (a prefix cache must not
turn a repeated prompt into a free prefill), while the server run and the baselines of one
configuration use exactly the same prompts. Results are a flat list of entries; tables and
plots pick what they need from it.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field

from .prompts import BenchRequest, make_requests


@dataclass
class Workload:
    name: str
    input_len: str
    output_len: str


@dataclass
class Plan:
    workloads: list[Workload]
    concurrencies: list[int]
    prompts_per_slot: int = 2  # num_prompts = max(min_prompts, prompts_per_slot * concurrency)
    min_prompts: int = 8
    one_at_a_time_prompts: int = 8  # one-at-a-time is slow: only the head of the c=1 prompts
    dtypes: list[str] = field(default_factory=lambda: ["float32", "bfloat16"])
    seed: int = 0

    def num_prompts(self, concurrency: int) -> int:
        return max(self.min_prompts, self.prompts_per_slot * concurrency)

    def seed_for(self, workload_index: int, concurrency: int) -> int:
        return self.seed + 1000 * workload_index + concurrency

    def requests(self, tokenizer, workload_index: int, concurrency: int) -> list[BenchRequest]:
        w = self.workloads[workload_index]
        return make_requests(
            tokenizer,
            num_prompts=self.num_prompts(concurrency),
            input_len=w.input_len,
            output_len=w.output_len,
            seed=self.seed_for(workload_index, concurrency),
        )


def _save(results_dir: str | None, name: str, result: dict) -> None:
    if results_dir:
        with open(os.path.join(results_dir, f"{name}.json"), "w") as f:
            json.dump(result, f, indent=1)


def serve_command(plan: Plan, wi: int, c: int, base_url: str) -> str:
    w = plan.workloads[wi]
    return (
        f"python -m bench.serve --base-url {base_url} --num-prompts {plan.num_prompts(c)} --input-len {w.input_len} "
        f"--output-len {w.output_len} --concurrency {c} --ignore-eos --seed {plan.seed_for(wi, c)}"
    )


def baseline_command(plan: Plan, wi: int, c: int, dtype: str, *, one_at_a_time: bool) -> str:
    w = plan.workloads[wi]
    n = plan.one_at_a_time_prompts if one_at_a_time else plan.num_prompts(c)
    return (
        f"python -m bench.baselines --num-prompts {n} --input-len {w.input_len} --output-len {w.output_len} "
        f"--batch-size {1 if one_at_a_time else c} --one-at-a-time-prompts 0 --dtypes {dtype} --seed {plan.seed_for(wi, c)}"
    )


def run_engine_phase(
    plan: Plan,
    tokenizer,
    base_url: str,
    *,
    results_dir: str | None,
    show_progress: bool = True,
    mode: str = "serve",
    only: set[tuple[str, int]] | None = None,
) -> list[dict]:
    """Every (workload, concurrency) of the plan against one server, or just those in `only`.

    `mode` tells this server's entries apart: "serve" for the main server, "latency" for the
    single-stream one that `--latency-server-env` starts.
    """
    from .serve import run_benchmark

    entries = []
    for wi, w in enumerate(plan.workloads):
        for c in plan.concurrencies:
            if only is not None and (w.name, c) not in only:
                continue
            requests = plan.requests(tokenizer, wi, c)
            result = asyncio.run(
                run_benchmark(
                    requests,
                    base_url=base_url,
                    concurrency=c,
                    ignore_eos=True,
                    seed=plan.seed_for(wi, c),
                    show_progress=show_progress,
                )
            )
            result["config"].update(input_len=w.input_len, output_len=w.output_len)
            _save(results_dir, f"engine-{'' if mode == 'serve' else mode + '-'}{w.name}-c{c}", result)
            entries.append(
                {
                    "backend": "engine",
                    "mode": mode,
                    "workload": w.name,
                    "concurrency": c,
                    "dtype": None,
                    "summary": result["summary"],
                    "command": serve_command(plan, wi, c, "$URL" if mode == "serve" else "$LATENCY_URL"),
                }
            )
            print(
                f"engine ({mode}) {w.name} c={c}: {result['summary']['output_throughput']:.1f} tok/s, {result['summary']['failed']} failed",
                flush=True,
            )
    return entries


def run_hf_phase(
    plan: Plan, tokenizer, *, results_dir: str | None, model_folder: str | None = None, show_progress: bool = True
) -> list[dict]:
    from .baselines import load_model, run_static

    entries = []
    for dtype in plan.dtypes:
        model = load_model(dtype, tokenizer, model_folder)
        for wi, w in enumerate(plan.workloads):
            head = plan.requests(tokenizer, wi, 1)[: plan.one_at_a_time_prompts]
            jobs = [("one-at-a-time", 1, head)] + [
                ("static", c, plan.requests(tokenizer, wi, c)) for c in plan.concurrencies if c > 1
            ]
            for mode, c, requests in jobs:
                result = run_static(model, tokenizer, requests, batch_size=c, show_progress=show_progress)
                result["config"].update(input_len=w.input_len, output_len=w.output_len, seed=plan.seed_for(wi, c))
                _save(results_dir, f"hf-{dtype}-{w.name}-{mode}-c{c}", result)
                entries.append(
                    {
                        "backend": "hf",
                        "mode": mode,
                        "workload": w.name,
                        "concurrency": c,
                        "dtype": dtype,
                        "summary": result["summary"],
                        "command": baseline_command(plan, wi, c, dtype, one_at_a_time=mode == "one-at-a-time"),
                    }
                )
                print(f"hf {dtype} {mode} {w.name} c={c}: {result['summary']['output_throughput']:.1f} tok/s", flush=True)
        del model
    return entries
