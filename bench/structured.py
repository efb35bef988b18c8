"""Constrained decoding's cost: decode throughput at 8 concurrent clients with a JSON schema,
against the same requests unconstrained, on one server with its default settings.

    .venv/bin/python -m bench.structured [--clients 8] [--requests 32] [--max-tokens 64] [--rounds 3]
    .venv/bin/python -m bench.structured --docs-dir docs/bench   # also raw/structured.json and the page

`make bench` (bench/report.py) runs it too and renders its table from the raw result it writes.

The masks are computed on a thread while the model runs; the end line reads /metrics for how long
they took per row and how much of that the engine loop still waited for after the forward pass.

Every request runs to max_tokens in both modes (the schema's one string field must be longer than
that), so both produce the same number of tokens and tok/s compares like with like. Rounds
alternate the two modes; the report is the median ratio (issue 22's target: at least 0.85).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

import httpx

from .client import stream_completion
from .raw import measured_line, publish
from .server import EngineServer

TARGET = 0.85  # issue 22: constrained tok/s at least this share of unconstrained

SCHEMA = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 2000}},
    "required": ["story"],
    "additionalProperties": False,
}
PROMPT = "Write a long story about a lighthouse keeper, as JSON with a single field 'story':"


async def one_pass(url: str, clients: int, requests: int, max_tokens: int, constrained: bool) -> float:
    """Output tokens per second over `requests` completions, `clients` at a time."""
    payload = {
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    if constrained:
        payload["guided_json"] = SCHEMA
    queue: asyncio.Queue = asyncio.Queue()
    for _ in range(requests):
        queue.put_nowait(payload)
    records = []

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            records.append(await stream_completion(client, f"{url}/v1/completions", queue.get_nowait()))

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    elapsed = time.perf_counter() - started
    failed = [r.error for r in records if r.error]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed: {failed[0]}")
    return sum(r.num_output_tokens for r in records) / elapsed


def mask_times(url: str) -> dict[str, float]:
    """The server's grammar mask counters (seconds, waited seconds, rows) from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"minivllm:grammar_mask_seconds", "minivllm:grammar_mask_wait_seconds", "minivllm:grammar_mask_rows"}
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        family.name.split(":")[1]: family.samples[0].value
        for family in text_string_to_metric_families(text)
        if family.name in wanted and family.samples
    }


def run(*, clients: int = 8, requests: int = 32, max_tokens: int = 64, rounds: int = 3, server_env: dict | None = None) -> dict:
    """Alternating rounds on one server of ours: {"rounds": [{"unconstrained", "json_schema"} tok/s], "masks", ...}."""
    from .machine import machine_info

    machine = machine_info()
    with EngineServer(server_env or {}) as server:
        asyncio.run(one_pass(server.base_url, clients, clients, 8, True))  # warm-up: the grammar compiles once
        measured = []
        for round_number in range(rounds):
            free = asyncio.run(one_pass(server.base_url, clients, requests, max_tokens, False))
            schema = asyncio.run(one_pass(server.base_url, clients, requests, max_tokens, True))
            measured.append({"unconstrained": free, "json_schema": schema})
            print(f"round {round_number + 1}: unconstrained {free:.1f} tok/s, JSON schema {schema:.1f} tok/s", flush=True)
        masks = mask_times(server.base_url)
        command = server.command
    return {
        "machine": machine,
        "server_command": command,
        "settings": {"clients": clients, "requests": requests, "max_tokens": max_tokens, "temperature": 0.8},
        "schema": SCHEMA,
        "prompt": PROMPT,
        "rounds": measured,
        "masks": masks,
    }


def render(result: dict) -> list[str]:
    s = result["settings"]
    ratios = [r["json_schema"] / r["unconstrained"] for r in result["rounds"]]
    median = statistics.median(ratios) if ratios else None
    lines = [
        "## Structured outputs: the cost of a JSON schema",
        "",
        measured_line(result["machine"], result.get("command")),
        "",
        f"Issue 22's target: decode throughput at {s['clients']} concurrent clients with a JSON schema (`guided_json`) at "
        f"least {TARGET} of the same requests unconstrained, on one server with its defaults (`{result['server_command']}`). "
        f"Each pass: {s['requests']} requests x {s['max_tokens']} output tokens at temperature {s['temperature']}, "
        "`ignore_eos`; the schema's one string field needs more tokens than that, so both modes run to `max_tokens`. "
        "The modes alternate within each round.",
        "",
        "| round | unconstrained tok/s | JSON schema tok/s | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for i, (r, ratio) in enumerate(zip(result["rounds"], ratios), 1):
        lines.append(f"| {i} | {r['unconstrained']:,.1f} | {r['json_schema']:,.1f} | {ratio:.2f} |")
    lines.append("")
    if median is not None:
        verdict = "met" if median >= TARGET else "not met"
        lines += [f"Median ratio over {len(ratios)} round(s): **{median:.2f}** (target {TARGET}: {verdict}).", ""]
    masks = result.get("masks") or {}
    rows = masks.get("grammar_mask_rows")
    if rows:
        lines.append(
            f"Masks: {rows:.0f} constrained rows, {1e6 * masks['grammar_mask_seconds'] / rows:.0f} µs a row computed on the "
            f"mask thread, {1e6 * masks['grammar_mask_wait_seconds'] / rows:.0f} µs a row waited for after the forward pass."
        )
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", default="bench/results")
    parser.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/structured.json and rewrite the page there")
    args = parser.parse_args(argv)
    result = run(clients=args.clients, requests=args.requests, max_tokens=args.max_tokens, rounds=args.rounds)
    result["command"] = "python -m bench.structured " + " ".join(argv if argv is not None else sys.argv[1:])
    os.makedirs(args.results_dir, exist_ok=True)
    save_to = os.path.join(args.results_dir, "structured.json")
    with open(save_to, "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(render(result)))
    if args.docs_dir:
        publish(args.docs_dir, "structured", result)


if __name__ == "__main__":
    main()
