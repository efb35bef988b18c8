"""How often a structured reply is cut by max_tokens before its JSON ends, on the embedded model.

    .venv/bin/python -m bench.json_endings [--requests 50] [--max-tokens 160] [--clients 8]
    .venv/bin/python -m bench.json_endings --docs-dir docs/bench   # also raw/json_endings.json and the page

`make bench` (bench/report.py) runs it too and renders its table from the raw result it writes.

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
import os
import sys

import httpx

from .raw import measured_line, publish
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


MODES = ("json_object", "json_schema")
TEMPERATURES = (None, 0.0)  # None: the request leaves it out (the default temperature)


def run(*, requests: int = 50, max_tokens: int = 160, clients: int = 8, server_env: dict | None = None) -> dict:
    """One server of ours on its defaults: {"tallies": [{"mode", "temperature", "requests", "failed", "cut"}], ...}."""
    from .machine import machine_info

    machine = machine_info()
    tallies = []
    with EngineServer(server_env or {}) as server:
        for mode in MODES:
            for temperature in TEMPERATURES:
                tally = asyncio.run(run_mode(server.base_url, mode, temperature, requests, max_tokens, clients))
                tallies.append({"mode": mode, "temperature": temperature, **tally})
                print(f"{mode}, temperature {temperature}: {tally['failed']} / {tally['requests']} do not parse", flush=True)
        command = server.command
    return {
        "machine": machine,
        "server_command": command,
        "settings": {"requests": requests, "max_tokens": max_tokens, "clients": clients},
        "schema": SCHEMA,
        "tallies": tallies,
    }


def render(result: dict) -> list[str]:
    s = result["settings"]
    lines = [
        "## Structured outputs: JSON that ends (issue 29)",
        "",
        measured_line(result["machine"], result.get("command")),
        "",
        "How often a structured chat reply does not parse because `max_tokens` cut it, on one server with its defaults "
        f"(`{result['server_command']}`): for `json_object` and for `json_schema` (a city: `name`, `country`, `population` "
        f"integer, `kind` enum), at the default temperature and at 0, {s['requests']} requests each (distinct prompts, "
        f"seeds 0-{s['requests'] - 1}), `max_tokens` {s['max_tokens']}.",
        "",
        "| mode | temperature | replies that do not parse | of those, cut by `max_tokens` |",
        "|---|---|---:|---:|",
    ]
    for t in result["tallies"]:
        label = "default" if t["temperature"] is None else f"{t['temperature']:g}"
        lines.append(f"| `{t['mode']}` | {label} | {t['failed']} / {t['requests']} | {t['cut']} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--results-dir", default="bench/results")
    parser.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/json_endings.json and rewrite the page there")
    args = parser.parse_args(argv)
    result = run(requests=args.requests, max_tokens=args.max_tokens, clients=args.clients)
    result["command"] = "python -m bench.json_endings " + " ".join(argv if argv is not None else sys.argv[1:])
    os.makedirs(args.results_dir, exist_ok=True)
    with open(os.path.join(args.results_dir, "json_endings.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(render(result)))
    if args.docs_dir:
        publish(args.docs_dir, "json_endings", result)


if __name__ == "__main__":
    main()
