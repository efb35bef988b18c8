"""Serving benchmark: random prompts streamed to any OpenAI-compatible `/v1/completions` URL.

Load is either closed-loop (`--concurrency N`: N requests in flight, a new one as soon as one
ends) or open-loop (`--request-rate R`: Poisson arrivals, R per second, optionally capped by
`--concurrency`). Neither given: every request is sent at once. Prints a summary and writes the
result (config, summary, per-request numbers) to `--result-json`.

    python -m bench.serve --base-url http://127.0.0.1:8000 --num-prompts 64 \
        --input-len 128 --output-len 16-256 --concurrency 8 --ignore-eos
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import random
import time

import httpx
from tqdm import tqdm

from .client import completion_payload, request_path, stream_completion
from .metrics import RequestRecord, per_request, summarize
from .prompts import BenchRequest, make_requests


async def _served_model(client: httpx.AsyncClient, base_url: str) -> str | None:
    """The first model `/v1/models` lists, or None (then no `model` field is sent)."""
    try:
        response = await client.get(f"{base_url}/v1/models")
        data = response.json().get("data") or []
        return data[0]["id"] if response.status_code == 200 and data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


async def _arrivals(count: int, rate: float, rng: random.Random):
    """Yields 0..count-1, spaced by exponential gaps (a Poisson process); all at once if rate is inf."""
    for index in range(count):
        yield index
        if math.isfinite(rate) and index < count - 1:
            await asyncio.sleep(rng.expovariate(rate))


async def _drive(
    client, base_url, requests, payloads, *, concurrency, request_rate, seed, progress
) -> tuple[list[RequestRecord], float]:
    limit = asyncio.Semaphore(concurrency) if concurrency else contextlib.nullcontext()
    records: list[RequestRecord | None] = [None] * len(requests)

    async def one(index: int):
        async with limit:
            records[index] = await stream_completion(client, base_url + request_path(requests[index]), payloads[index])
            records[index].prompt_tokens = records[index].prompt_tokens or requests[index].prompt_len
        progress.update(1)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        async for index in _arrivals(len(requests), request_rate, random.Random(seed)):
            group.create_task(one(index))
    return records, time.perf_counter() - started


async def run_benchmark(
    requests: list[BenchRequest],
    *,
    base_url: str,
    model: str | None = None,
    concurrency: int | None = None,
    request_rate: float = math.inf,
    ignore_eos: bool = False,
    temperature: float = 0.0,
    seed: int = 0,
    warmup: bool = True,
    show_progress: bool = True,
    timeout_s: float = 600.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict:
    """Runs `requests` against `base_url`; returns {"config", "summary", "requests"}.

    `transport` replaces the network (tests pass an `httpx.MockTransport`).
    """
    base_url = base_url.rstrip("/")
    url = f"{base_url}/v1/completions"
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, transport=transport) as client:
        model = model or await _served_model(client, base_url)
        payloads = [completion_payload(r, model=model, temperature=temperature, ignore_eos=ignore_eos) for r in requests]
        if warmup and requests:
            probe = BenchRequest(prompt=" warm up the server", prompt_len=4, output_len=4)
            check = await stream_completion(
                client, url, completion_payload(probe, model=model, temperature=temperature, ignore_eos=ignore_eos)
            )
            if check.error:
                raise RuntimeError(f"warm-up request to {url} failed: {check.error}")
        with tqdm(
            total=len(requests), desc=f"serve c={concurrency or '-'} rate={request_rate}", disable=not show_progress, leave=False
        ) as progress:
            records, duration = await _drive(
                client,
                base_url,
                requests,
                payloads,
                concurrency=concurrency,
                request_rate=request_rate,
                seed=seed,
                progress=progress,
            )
    config = {
        "base_url": base_url,
        "model": model,
        "num_prompts": len(requests),
        "concurrency": concurrency,
        "request_rate": request_rate if math.isfinite(request_rate) else "inf",
        "ignore_eos": ignore_eos,
        "temperature": temperature,
        "seed": seed,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    return {"config": config, "summary": summarize(records, duration), "requests": per_request(records)}


def format_summary(summary: dict) -> str:
    def num(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        f"completed {summary['completed']}  failed {summary['failed']}  in {summary['duration_s']:.2f} s",
        f"request throughput   {num(summary['request_throughput'], '.2f')} req/s",
        f"output throughput    {num(summary['output_throughput'], '.1f')} tok/s",
    ]
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        d = summary[key]
        lines.append(f"{label:<5} ms  mean {num(d['mean'], '8.1f')}   p50 {num(d['p50'], '8.1f')}   p99 {num(d['p99'], '8.1f')}")
    if summary["errors"]:
        lines.append(f"errors: {summary['errors']}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="server root; /v1/completions is appended")
    parser.add_argument("--model", default=None, help="model name to send (default: the first of /v1/models)")
    parser.add_argument("--tokenizer", default=None, help="HF tokenizer folder for the prompts (default: embedded SmolLM2)")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--input-len", default="128", help="prompt tokens: N or LOW-HIGH")
    parser.add_argument("--output-len", default="64", help="max_tokens: N or LOW-HIGH")
    parser.add_argument("--concurrency", type=int, default=None, help="requests in flight at most")
    parser.add_argument("--request-rate", type=float, default=math.inf, help="Poisson arrivals per second (default inf)")
    parser.add_argument("--ignore-eos", action="store_true", help="ask for exactly max_tokens tokens (vLLM extension)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--result-json", default=None, help="where to write the result")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    from .model_files import load_tokenizer

    args = parse_args(argv)
    requests = make_requests(
        load_tokenizer(args.tokenizer),
        num_prompts=args.num_prompts,
        input_len=args.input_len,
        output_len=args.output_len,
        seed=args.seed,
    )
    result = asyncio.run(
        run_benchmark(
            requests,
            base_url=args.base_url,
            model=args.model,
            concurrency=args.concurrency,
            request_rate=args.request_rate,
            ignore_eos=args.ignore_eos,
            temperature=args.temperature,
            seed=args.seed,
            warmup=not args.no_warmup,
        )
    )
    result["config"].update(input_len=args.input_len, output_len=args.output_len)
    print(format_summary(result["summary"]))
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"result written to {args.result_json}")
    return result


if __name__ == "__main__":
    main()
