"""Engines killed under load: how many requests complete, how many resumed, how many failed, and
what a resume costs a request's latency (issue 47's larger run).

A scale-out deployment on this machine (tests/scaleout/cluster.py: `runengine` workers and a
Daphne web worker on the real Redis and PostgreSQL), the embedded model, 200 streamed greedy
requests at 32 at a time; every `--every` seconds the engine holding the most requests is
SIGKILLed and a fresh one started in its place. Each reply is compared with the same request
served without a fault (a first pass), token for token.

    python -m bench.resume_chaos                   # 200 requests, 32 at a time, 3 kills (~5 min on 2 cores)
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
    args = parser.parse_args(argv)
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
    same = sum(a["text"] == b["text"] and a["reason"] == b["reason"] for a, b in zip(got, reference))
    extra = (
        statistics.median(r["latency"] for r in resumed) - statistics.median(r["latency"] for r in plain)
        if resumed and plain
        else None
    )
    print(f"{args.requests} requests at {args.concurrency} concurrent, {len(kills)} engines SIGKILLed ({', '.join(kills)})")
    print(
        f"completed {sum(r['reason'] == 'length' for r in got)}, resumed {len(resumed)}, errors {sum(r['error'] is not None for r in got)}"
    )
    print(f"replies equal to the fault-free pass, token for token: {same} of {len(got)}")
    if extra is not None:
        print(
            f"median latency: resumed {statistics.median(r['latency'] for r in resumed):.1f} s, others "
            f"{statistics.median(r['latency'] for r in plain):.1f} s (+{extra:.1f} s a resume, detection included)"
        )


if __name__ == "__main__":
    main()
