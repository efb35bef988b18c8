"""The performance issue's five targets, judged from one report: met or not, with the ratio.

The targets were set on a machine whose reference figures are below (HF and llama-server,
SmolLM2-135M, 64 output tokens). Two targets are absolute times (single-client inter-token
latency, time to first token at 32 clients); on a different CPU they are judged twice: as
written, and scaled by how much slower this run's HF float32 one-at-a-time baseline is than
the reference one (the "machine factor"), which is the fairest like-for-like yardstick we have.
"""

from __future__ import annotations

import math

from .entries import baseline, metric, pick, ratio, throughput

REFERENCE_HF_F32_ONE_AT_A_TIME = 24.0  # tok/s on the reference machine
ITL_TARGET_MS = 7.0
TTFT_TARGET_MS = 2000.0  # llama-server's TTFT p50 at 32 clients on the reference machine
THROUGHPUT_VS_STATIC_BF16 = 1.2
MIXED_VS_STATIC = 2.0


def machine_factor(entries: list[dict], workload: str) -> float:
    """> 1 when this machine is slower than the reference one (HF float32, one request at a time)."""
    here = throughput(baseline(entries, workload, 1, "float32"))
    return ratio(REFERENCE_HF_F32_ONE_AT_A_TIME, here)


def single_stream_entry(entries: list[dict]) -> dict | None:
    """One client, uniform workload: from the latency server where the run started one."""
    return pick(entries, backend="engine", mode="latency", workload="uniform", concurrency=1) or pick(
        entries, backend="engine", mode="serve", workload="uniform", concurrency=1
    )


def _verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("**met**" if ok else "**not met**")


def _fmt(value: float, unit: str = "", digits: int = 2) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:,.{digits}f}{unit}"


def _judge(value: float, passes) -> bool | None:
    return None if math.isnan(value) else bool(passes(value))


def _absolute_target(target, ours, hf, hf_name, limit_ms, factor, *, unit, scale, digits, passes) -> dict:
    """A time target: judged as written and scaled by the machine factor (values in ms, shown / scale)."""

    def shown(ms: float) -> str:
        return _fmt(ms / scale, unit, digits)

    return {
        "target": target,
        "measured": f"{shown(ours)} ({hf_name}, faster dtype: {shown(hf)}); scaled target {shown(limit_ms * factor)}",
        "verdict": (
            f"as written {_verdict(_judge(ours, lambda v: passes(v, limit_ms)))}; "
            f"scaled {_verdict(_judge(ours, lambda v: passes(v, limit_ms * factor)))}"
        ),
    }


def evaluate(report: dict) -> list[dict]:
    """One row per target: what was measured against what, the verdict, and a note."""
    entries = report["entries"]
    top = max(report["plan"]["concurrencies"])
    workloads = {w["name"] for w in report["plan"]["workloads"]}
    rows = []

    ours = throughput(pick(entries, backend="engine", mode="serve", workload="uniform", concurrency=top))
    vs_bf16 = ratio(ours, throughput(baseline(entries, "uniform", top, "bfloat16")))
    vs_f32 = ratio(ours, throughput(baseline(entries, "uniform", top, "float32")))
    rows.append(
        {
            "target": f"1. {top} clients, uniform: >= {THROUGHPUT_VS_STATIC_BF16}x HF bf16 static batch over HTTP",
            "measured": f"{_fmt(ours, ' tok/s', 1)}: {_fmt(vs_bf16, 'x')} HF bf16 static, {_fmt(vs_f32, 'x')} HF float32 static",
            "verdict": _verdict(_judge(vs_bf16, lambda r: r >= THROUGHPUT_VS_STATIC_BF16)),
        }
    )

    if "mixed" in workloads:
        mixed = throughput(pick(entries, backend="engine", mode="serve", workload="mixed", concurrency=top))
        statics = {d: throughput(baseline(entries, "mixed", top, d)) for d in ("bfloat16", "float32")}
        best = max((v for v in statics.values() if not math.isnan(v)), default=math.nan)
        vs_best = ratio(mixed, best)
        rows.append(
            {
                "target": f"2. mixed output lengths, {top} clients: >= {MIXED_VS_STATIC}x static batching",
                "measured": (
                    f"{_fmt(mixed, ' tok/s', 1)}: {_fmt(vs_best, 'x')} the faster HF static batch "
                    f"(bf16 {_fmt(statics['bfloat16'], '', 1)}, float32 {_fmt(statics['float32'], '', 1)} tok/s)"
                ),
                "verdict": _verdict(_judge(vs_best, lambda r: r >= MIXED_VS_STATIC)),
            }
        )

    factor = machine_factor(entries, "uniform")
    single = single_stream_entry(entries)
    itl = metric(single, "itl_ms", "p50")
    hf_itl = min(metric(baseline(entries, "uniform", 1, d), "itl_ms", "p50") for d in ("bfloat16", "float32"))
    server = "the latency server" if single and single["mode"] == "latency" else "the main server"
    rows.append(
        _absolute_target(
            f"3. one client: inter-token latency p50 <= {ITL_TARGET_MS:g} ms ({server})",
            itl,
            hf_itl,
            "HF one-at-a-time",
            ITL_TARGET_MS,
            factor,
            unit=" ms",
            scale=1.0,
            digits=1,
            passes=lambda v, t: v <= t,
        )
    )

    ttft = metric(pick(entries, backend="engine", mode="serve", workload="uniform", concurrency=top), "ttft_ms", "p50")
    hf_ttft = min(metric(baseline(entries, "uniform", top, d), "ttft_ms", "p50") for d in ("bfloat16", "float32"))
    rows.append(
        _absolute_target(
            f"4. {top} clients: time to first token p50 < llama-server's {TTFT_TARGET_MS / 1000:g} s",
            ttft,
            hf_ttft,
            "HF static",
            TTFT_TARGET_MS,
            factor,
            unit=" s",
            scale=1000.0,
            digits=2,
            passes=lambda v, t: v < t,
        )
    )

    device = (report.get("server") or {}).get("device") or ""
    rows.append(
        {
            "target": "5. CUDA: same code on a GPU, KV pool from free memory, CUDA-graph decode",
            "measured": "this run: " + (device or "unknown device"),
            "verdict": _verdict(None) if not device.startswith("cuda") else "see the tables",
        }
    )
    return rows


def targets_section(report: dict) -> list[str]:
    factor = machine_factor(report["entries"], "uniform")
    out = [
        "## Targets (performance issue)",
        "",
        (
            f"Machine factor {_fmt(factor)}: this run's HF float32 one-at-a-time baseline took {_fmt(factor, 'x')} the time per "
            "token it took on the machine the targets were set on (above 1: this machine is slower); absolute targets are "
            "judged as written and scaled by that factor."
        ),
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
    ]
    out += [f"| {r['target']} | {r['measured']} | {r['verdict']} |" for r in evaluate(report)]
    return out + [""]
