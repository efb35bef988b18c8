"""Our defaults against llama.cpp's server in the same run, on the same prompts and the same GGUF.

Rounds alternate the two servers, each started fresh: one client on chat questions (natural
prompts: bench/prompts.py's CHAT_QUESTIONS; ours with speculation on, the default, and off), 8 and
32 clients on 64 output tokens of random-word prompts, 32 clients on 16-256, a 2,530-token prompt's
prefill (llama-server gets one slot of 8,192 for it: its 32 slots of 1,024 refuse that prompt), time
from start to `/health` 200, and resident memory once loading has settled (the target's measure) and
again after the loads. Every figure is reported as a ratio to llama-server's in the same round, and
judged against issue 19's targets. A figure with a failed request is measured again (twice at most);
one that still fails is "not measured", and a verdict needs every round's figure.
"""

from __future__ import annotations

import asyncio
import math
import os

from .llama_server import LlamaServer, build, build_that_runs
from .prompts import CHAT, requests_for

LOADS = (  # name, concurrency, prompts, input tokens (CHAT: chat questions), output tokens
    ("1 client", 1, 8, CHAT, "64"),
    ("8 clients", 8, 16, "8-40", "64"),
    ("32 clients", 32, 64, "8-40", "64"),
    ("32 clients, 16-256 tokens", 32, 64, "8-40", "16-256"),
)
PREFILL = ("2,530-token prompt", 1, 3, "2530", "1")
TARGETS = {  # (load, figure): (target ratio to llama-server, higher is better)
    ("1 client", "tok/s"): (1.8, True),
    ("1 client", "ITL p50"): (0.6, False),
    ("32 clients", "tok/s"): (2.5, True),
    ("32 clients", "TTFT p50"): (1.0, False),
    ("32 clients, 16-256 tokens", "tok/s"): (2.5, True),
    ("2,530-token prompt", "prefill tok/s"): (2.0, True),
}
READY_TARGET_S = 5.0
MEMORY_SLACK_MB = 350
SPEC_OFF = "ours, speculation off"  # a second server of ours, MINIVLLM_SPECULATIVE=off, for the one-client load
ATTEMPTS = 3  # a load with a failed request is measured again, at most this many times in all


def prompts_used(loads) -> dict[str, str]:
    """What each load sent, for the report: chat questions or random words."""
    return {load[0]: "chat questions" if load[3] == CHAT else "random words" for load in loads}


def _measure(base_url: str, tokenizer, load, seed: int) -> dict:
    """The load's figures; all None (not measured) where a request still failed after ATTEMPTS tries."""
    for attempt in range(1, ATTEMPTS + 1):
        figures = _measure_once(base_url, tokenizer, load, seed)
        if not figures["failed"]:
            return {**figures, "attempts": attempt}
        print(f"{load[0]}: {figures['failed']} request(s) failed ({figures['errors'][:1]}); attempt {attempt}", flush=True)
    return {**{k: None for k in figures if k not in ("failed", "errors")}, "failed": figures["failed"], "attempts": ATTEMPTS}


def _measure_once(base_url: str, tokenizer, load, seed: int) -> dict:
    from .serve import run_benchmark

    name, concurrency, prompts, input_len, output_len = load
    requests = requests_for(tokenizer, num_prompts=prompts, input_len=input_len, output_len=output_len, seed=seed)
    result = asyncio.run(
        run_benchmark(
            requests,
            base_url=base_url,
            concurrency=concurrency,
            ignore_eos=True,
            seed=seed,
            show_progress=False,
            warmup=name != PREFILL[0],
        )
    )
    s = result["summary"]
    figures = {
        "tok/s": s["output_throughput"],
        "ITL p50": s["itl_ms"]["p50"],
        "TTFT p50": s["ttft_ms"]["p50"],
        "failed": s["failed"],
        "errors": s.get("errors") or [],
    }
    if name == PREFILL[0]:
        figures["prefill tok/s"] = int(input_len) / (s["ttft_ms"]["p50"] / 1000) if s["ttft_ms"]["p50"] else None
    return figures


def run_rounds(tokenizer, gguf: str, *, rounds: int, server_env: dict, results_dir: str) -> dict:
    """{"rounds": [{"ours": {...}, "llama-server": {...}}, ...], "commands": {...}}: per load, its figures."""
    from .server import EngineServer

    build(build_that_runs())
    out = {"rounds": [], "commands": {}, "prompts": prompts_used((*LOADS, PREFILL))}
    for r in range(rounds):
        row = {}
        with EngineServer(server_env, log_path=os.path.join(results_dir, f"peer-ours-{r}.log")) as ours:
            loaded_mb = ours.resident_after_load_mb()
            row["ours"] = {load[0]: _measure(ours.base_url, tokenizer, load, seed=100 + r) for load in (*LOADS, PREFILL)}
            row["ours"]["server"] = {
                "ready_s": ours.ready_s,
                "rss_mb": loaded_mb,
                "rss_after_loads_mb": ours.resident_mb(),
                "weights_and_kv_mb": _weights_and_kv_mb(ours.stats),
            }
            out["commands"]["ours"] = ours.command
        off_env = {**server_env, "MINIVLLM_SPECULATIVE": "off"}
        with EngineServer(off_env, log_path=os.path.join(results_dir, f"peer-ours-spec-off-{r}.log")) as ours:
            row[SPEC_OFF] = {LOADS[0][0]: _measure(ours.base_url, tokenizer, LOADS[0], seed=100 + r)}
            out["commands"][SPEC_OFF] = ours.command
        with LlamaServer(gguf, log_path=os.path.join(results_dir, f"peer-llama-{r}.log")) as peer:
            loaded_mb = peer.resident_after_load_mb()
            row["llama-server"] = {load[0]: _measure(peer.base_url, tokenizer, load, seed=100 + r) for load in LOADS}
            row["llama-server"]["server"] = {
                "ready_s": peer.ready_s,
                "rss_mb": loaded_mb,
                "rss_after_loads_mb": peer.resident_mb(),
            }
            out["commands"]["llama-server"] = peer.command
        with LlamaServer(gguf, slots=1, context=8192, log_path=os.path.join(results_dir, f"peer-llama-prefill-{r}.log")) as peer:
            row["llama-server"][PREFILL[0]] = _measure(peer.base_url, tokenizer, PREFILL, seed=100 + r)
            out["commands"]["llama-server (prefill)"] = peer.command
        out["rounds"].append(row)
        print(
            f"peer round {r + 1}: 32 clients {row['ours']['32 clients']['tok/s']} against "
            f"{row['llama-server']['32 clients']['tok/s']} tok/s",
            flush=True,
        )
    return out


def _weights_and_kv_mb(stats: dict) -> float | None:
    """What the memory target allows besides the 350 MB of slack: the KV pool and the weights, from /stats."""
    kv, weights = stats.get("kv_pool_mb"), stats.get("weights_mb")
    return kv + weights if kv is not None and weights is not None else None


def _ratio(a, b) -> float:
    return a / b if a is not None and b else math.nan


def _verdict(ratios: list[float], target: float, higher: bool) -> str:
    """Judged only on every round's figure: one missing (a failed request) and it is not measured."""
    if not ratios or any(r is None or math.isnan(r) for r in ratios):
        return "not measured"
    met = [r >= target if higher else r <= target for r in ratios]
    return "met" if all(met) else f"met in {sum(met)} of {len(met)} rounds" if any(met) else "not met"


def prompts_line(prompts: dict | None) -> str:
    """What each load sent; a report from before the chat questions sent random words everywhere."""
    if not prompts:
        return "Every load sent seeded random words (this run predates the chat-question prompts)."
    chat = [name for name, kind in prompts.items() if kind == "chat questions"]
    if not chat:
        return "Every load sent seeded random words."
    return (
        f"{', '.join(chat)}: chat questions behind the chat template (bench/prompts.py's CHAT_QUESTIONS), "
        "ours with speculation on (the default) and off; the other loads: seeded random words."
    )


def render(peer: dict) -> list[str]:
    """The markdown section: each figure, ours and llama-server's per round, the ratio, the target."""
    rounds = peer["rounds"]
    rebuilt = any("(built " in command for command in peer["commands"].values())
    caveat = " (peer rebuilt)" if rebuilt else ""
    lines = [
        "## Against llama.cpp's llama-server (same run, alternating rounds)",
        "",
        "Our server with no settings against `llama-server` on the same GGUF and prompts; a ratio below 1 is "
        "better for latencies. "
        + prompts_line(peer.get("prompts"))
        + " Commands: "
        + "; ".join(f"{k}: `{v}`" for k, v in peer["commands"].items()),
        "",
    ]
    if rebuilt:
        lines += [
            "**llama-server ran a build without its native AMX path here (the native one crashed starting), so these "
            "ratios are against a slower peer than its native one and no target below counts as met.**",
            "",
        ]
    lines += ["| load | figure | llama-server | ours | ratio | target | verdict |", "|---|---|---:|---:|---:|---:|---|"]

    def joined(values, digits=1):
        return ", ".join("–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}" for v in values)

    for load in (*LOADS, PREFILL):
        name = load[0]
        for figure in ("prefill tok/s",) if name == PREFILL[0] else ("tok/s", "ITL p50", "TTFT p50"):
            theirs = [r["llama-server"][name].get(figure) for r in rounds]
            ours = [r["ours"][name].get(figure) for r in rounds]
            ratios = [_ratio(o, t) for o, t in zip(ours, theirs)]
            target, higher = TARGETS.get((name, figure), (None, True))
            verdict = _verdict(ratios, target, higher) if target else ""
            if rebuilt and verdict.startswith("met"):
                verdict = "not judged: peer rebuilt"
            shown = f"{'>=' if higher else '<='} {target}x" if target else ""
            lines.append(
                f"| {name} | {figure} | {joined(theirs)} | {joined(ours)} | {joined(ratios, 2)}x{caveat} | {shown} | {verdict} |"
            )
        if all(SPEC_OFF in r and name in r[SPEC_OFF] for r in rounds):  # shown beside the default, not judged
            for figure in ("tok/s", "ITL p50"):
                theirs = [r["llama-server"][name].get(figure) for r in rounds]
                off = [r[SPEC_OFF][name].get(figure) for r in rounds]
                ratios = [_ratio(o, t) for o, t in zip(off, theirs)]
                lines.append(
                    f"| {name}, speculation off | {figure} | {joined(theirs)} | {joined(off)} | {joined(ratios, 2)}x{caveat} | | |"
                )
    ready = [r["ours"]["server"]["ready_s"] for r in rounds]
    lines.append(
        f"| start | to /health 200, s | {joined([r['llama-server']['server']['ready_s'] for r in rounds], 2)} | "
        f"{joined(ready, 2)} | | <= {READY_TARGET_S:.0f} s | {_verdict(ready, READY_TARGET_S, False)} |"
    )
    rss = [r["ours"]["server"]["rss_mb"] for r in rounds]
    allowed = [(r["ours"]["server"]["weights_and_kv_mb"] or math.nan) + MEMORY_SLACK_MB for r in rounds]
    lines.append(
        f"| start | resident MB after load | {joined([r['llama-server']['server']['rss_mb'] for r in rounds], 0)} | "
        f"{joined(rss, 0)} | | <= weights + KV + {MEMORY_SLACK_MB} ({joined(allowed, 0)}) | "
        f"{_verdict([_ratio(m, a) for m, a in zip(rss, allowed)], 1.0, False)} |"
    )
    after = [[r[side]["server"].get("rss_after_loads_mb") for r in rounds] for side in ("llama-server", "ours")]
    lines.append(f"| end | resident MB after the loads | {joined(after[0], 0)} | {joined(after[1], 0)} | | | |")
    return lines + [""]
