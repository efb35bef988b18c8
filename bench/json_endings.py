"""How often a structured reply is cut by max_tokens before its JSON ends, on the embedded model.

    .venv/bin/python -m bench.json_endings [--requests 50] [--max-tokens 160] [--clients 8]

For each of `json_object` and `json_schema` (issue 29's city schema) and each of the default
temperature and 0, `--requests` chat requests (distinct prompts, seeds 0..n-1) go to one server
with its default settings. A reply "fails" when `json.loads` refuses it; the table counts those and
how many of them ended with `finish_reason: "length"` (the model was still writing when max_tokens
came). Small models wander: an integer that never ends, a string that runs on; the grammar's number
bounds (inference/engine/sample/json_schemas.py) are what keep the first from happening.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httpx

from .server import EngineServer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string"},
        "population": {"type": "integer"},
        "kind": {"type": "string", "enum": ["city", "town", "village"]},
    },
    "required": ["name", "country", "population", "kind"],
}
PLACES = ("Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Perth", "Quito", "Hanoi", "Dakar")
ASKS = (
    "Describe {} as JSON.",
    "{}?",
    "Give me the facts about {} as a JSON record.",
    "Tell me about {} in JSON.",
    "Write {}'s population and country as JSON.",
)


def prompts(count: int) -> list[str]:
    every = [ask.format(place) for ask in ASKS for place in PLACES]
    return [every[i % len(every)] for i in range(count)]


async def run_mode(url: str, mode: str, temperature: float | None, requests: int, max_tokens: int, clients: int) -> dict:
    """{"failed": replies json.loads refused, "cut": of those, the ones max_tokens ended, "requests": n}."""
    if mode == "json_object":
        response_format = {"type": "json_object"}
    else:
        response_format = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA}}
    queue: asyncio.Queue = asyncio.Queue()
    for seed, prompt in enumerate(prompts(requests)):
        body = {
            "messages": [{"role": "user", "content": prompt}],
            "response_format": response_format,
            "max_tokens": max_tokens,
            "seed": seed,
        }
        if temperature is not None:
            body["temperature"] = temperature
        queue.put_nowait(body)
    tally = {"requests": requests, "failed": 0, "cut": 0}

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            reply = await client.post(f"{url}/v1/chat/completions", json=queue.get_nowait())
            reply.raise_for_status()
            choice = reply.json()["choices"][0]
            try:
                json.loads(choice["message"]["content"])
            except ValueError:
                tally["failed"] += 1
                tally["cut"] += choice["finish_reason"] == "length"

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    return tally


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    print("| mode | temperature | replies that do not parse | of those, cut by max_tokens |")
    print("|---|---|---:|---:|")
    with EngineServer() as server:
        for mode in ("json_object", "json_schema"):
            for temperature in (None, 0.0):
                tally = asyncio.run(run_mode(server.base_url, mode, temperature, args.requests, args.max_tokens, args.clients))
                label = "default" if temperature is None else "0"
                print(f"| {mode} | {label} | {tally['failed']} / {tally['requests']} | {tally['cut']} |", flush=True)


if __name__ == "__main__":
    main()
