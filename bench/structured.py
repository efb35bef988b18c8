"""Constrained decoding's cost: decode throughput at 8 concurrent clients with a JSON schema,
against the same requests unconstrained, on one server with its default settings.

    .venv/bin/python -m bench.structured [--clients 8] [--requests 32] [--max-tokens 64] [--rounds 2]

The masks are computed on a thread while the model runs; the end line reads /metrics for how long
they took per row and how much of that the engine loop still waited for after the forward pass.

Every request runs to max_tokens in both modes (the schema's one string field must be longer than
that), so both produce the same number of tokens and tok/s compares like with like. Rounds
alternate the two modes; the report is the median ratio (issue 22's target: at least 0.85).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from .client import stream_completion
from .server import EngineServer

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with EngineServer() as server:
        asyncio.run(one_pass(server.base_url, args.clients, args.clients, 8, True))  # warm-up: the grammar compiles once
        ratios = []
        for round_number in range(args.rounds):
            free = asyncio.run(one_pass(server.base_url, args.clients, args.requests, args.max_tokens, False))
            schema = asyncio.run(one_pass(server.base_url, args.clients, args.requests, args.max_tokens, True))
            ratios.append(schema / free)
            print(
                f"round {round_number + 1}: unconstrained {free:.1f} tok/s, JSON schema {schema:.1f} tok/s, ratio {schema / free:.2f}"
            )
        print(f"median ratio over {args.rounds} rounds: {statistics.median(ratios):.2f} (target 0.85)")
        masks = mask_times(server.base_url)
        rows = masks["grammar_mask_rows"] or 1
        print(
            f"masks: {masks['grammar_mask_rows']:.0f} rows, {1e6 * masks['grammar_mask_seconds'] / rows:.0f} us per row on the mask "
            f"thread, {1e6 * masks['grammar_mask_wait_seconds'] / rows:.0f} us per row waited after the forward pass"
        )


if __name__ == "__main__":
    main()
