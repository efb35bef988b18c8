"""Engines killed under load: how many requests complete, how many resumed, how many failed, and
what a resume costs a request's latency (issue 47's larger run).

A scale-out deployment on this machine (tests/scaleout/cluster.py: `runengine` workers and a
Daphne web worker on the real Redis and PostgreSQL), the embedded model, 200 streamed greedy
requests at 32 at a time; every `--every` seconds the engine holding the most requests is
SIGKILLed and a fresh one started in its place. Each reply is compared with the same request
served without a fault (a first pass), token for token.

    python -m bench.resume_chaos                   # 200 requests, 32 at a time, 3 kills (~5 min on 2 cores)
    python -m bench.resume_chaos --docs-dir docs/bench   # also docs/bench/raw/resume.json and the page rewritten

The servers get the cluster's settings only: the shell's MINIVLLM_* variables do not reach them.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from inference.engine.loader import embedded_model_source

from .raw import measured_line, publish


def stream(url: str, body: dict) -> dict:
    started = time.monotonic()
    text, reason, error = "", None, None
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=300) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                error = chunk["error"]["message"]
                continue
            choice = chunk["choices"][0]
            text += choice.get("text", "")
            reason = choice.get("finish_reason") or reason
            request_id = chunk["id"]
    return {"id": request_id, "text": text, "reason": reason, "error": error, "latency": time.monotonic() - started}


def run(url: str, bodies: list[dict], concurrency: int) -> list[dict]:
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda body: stream(url, body), bodies))


def main(argv=None) -> None:
    from tests.scaleout.cluster import Cluster, unreachable

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--every", type=float, default=12.0, help="seconds between kills")
    parser.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/resume.json and rewrite the page there")
    args = parser.parse_args(argv)
    from .machine import machine_info

    machine = machine_info()
    if unreachable():
        raise SystemExit(unreachable())
    source = embedded_model_source()
    cluster = Cluster(str(Path(source.path) / source.gguf_file), Path(tempfile.mkdtemp(prefix="resume-chaos-"))).prepare()
    cluster.env.update({"MINIVLLM_DTYPE": "auto", "MINIVLLM_KV_CACHE_MB": "64", "MINIVLLM_MAX_NUM_SEQS": "16"})
    cluster.env["MINIVLLM_ENGINE_TIMEOUT"] = "5"
    bodies = [
        {
            "prompt": f"Tell me story number {i} about a lighthouse.",
            "max_tokens": args.tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        for i in range(args.requests)
    ]
    try:
        for n in range(args.engines):
            cluster.start_engine(f"engine-{n}")
        url = cluster.start_web()
        cluster.wait_ready(engines=args.engines)
        reference = run(url, bodies, args.concurrency)
        kills: list[str] = []

        def killer() -> None:
            for k in range(args.kills):
                time.sleep(args.every)
                stats = httpx.get(f"{url}/stats", timeout=10).json()["engines"]
                live = [e for e in stats if e["engine_id"] in cluster.engines and cluster.engines[e["engine_id"]].poll() is None]
                victim = max(live, key=lambda e: e["in_flight"] or 0)["engine_id"]
                cluster.engines[victim].send_signal(signal.SIGKILL)
                kills.append(victim)
                cluster.start_engine(f"replacement-{k}")

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        got = run(url, bodies, args.concurrency)
        thread.join()
        rows = {r["id"]: cluster.row(r["id"]) for r in got}
    finally:
        cluster.stop()
    resumed = [r for r in got if rows[r["id"]].get("resumes")]
    plain = [r for r in got if not rows[r["id"]].get("resumes")]
    result = {
        "machine": machine,
        "command": "python -m bench.resume_chaos"
        + "".join(
            f" --{name} {value}" for name, value in vars(args).items() if name != "docs_dir" and value != parser.get_default(name)
        ),
        "requests": args.requests,
        "concurrency": args.concurrency,
        "tokens": args.tokens,
        "killed": kills,
        "completed": sum(r["reason"] == "length" for r in got),
        "resumed": len(resumed),
        "errors": sum(r["error"] is not None for r in got),
        "same_as_fault_free": sum(a["text"] == b["text"] and a["reason"] == b["reason"] for a, b in zip(got, reference)),
        "median_latency_s": {
            "resumed": statistics.median(r["latency"] for r in resumed) if resumed else None,
            "others": statistics.median(r["latency"] for r in plain) if plain else None,
        },
        "latencies_s": {r["id"]: r["latency"] for r in got},
    }
    if args.docs_dir:
        publish(args.docs_dir, "resume", result)
    print("\n".join(render(result)))


def render(result: dict) -> list[str]:
    """The run's section on the generated page (bench/tables.py) and its printout."""

    latency = result["median_latency_s"]
    lines = [
        "## Engines killed under load: resumed streams",
        "",
        f"The embedded model on two `runengine` workers and a Daphne on Redis and PostgreSQL; {result['requests']} "
        f"streamed greedy requests of {result['tokens']} tokens, {result['concurrency']} at a time; "
        f"{len(result['killed'])} engines SIGKILLed ({', '.join(result['killed']) or 'none'}), each replaced.",
        "",
        measured_line(result.get("machine") or {}, result.get("command")),
        "",
        f"Completed {result['completed']} of {result['requests']}, resumed {result['resumed']}, errors {result['errors']}; "
        f"replies equal to the fault-free pass, token for token: {result['same_as_fault_free']} of {result['requests']}.",
    ]
    if latency["resumed"] is not None and latency["others"] is not None:
        lines.append(
            f"Median latency: resumed {latency['resumed']:.1f} s, others {latency['others']:.1f} s "
            f"(+{latency['resumed'] - latency['others']:.1f} s a resume, the dead engine's detection included)."
        )
    return lines + [""]


if __name__ == "__main__":
    main()
