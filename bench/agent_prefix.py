"""The agent case (issue 53): 16 chat requests behind one ~1,500-token system prompt, as an agent
resends its instructions every turn, against llama-server on the same file (Qwen3.5's 2B shape by
default: bench/shaped_qwen35.py, the hybrid whose prefix our state checkpoints make reusable).

Each server is started with speculation off and nothing else but, for llama-server, room for the
requests: `-np 16 -c 65536` (a slot of 4,096 tokens per request: `-c 32768` over 32 slots leaves each
1,024, less than the system prompt), its prompt cache on as by default. One request with the system prompt warms the
prefix; then the 16, each with its own question, go at once, streamed, 32 output tokens each: the
figures are their output tokens a second (first request sent to last token) and their median time to
first token (its first content chunk, printed or empty), ours as a ratio to llama-server's. Run alone: both servers share the machine's cores.

    python -m bench.agent_prefix                      # prints both servers' figures and the ratios
    python -m bench.agent_prefix --out docs/bench/raw/agent_prefix.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx

from .llama_server import LlamaServer
from .server import EngineServer

REQUESTS, OUTPUT_TOKENS, SYSTEM_TOKENS = 16, 32, 1500
RULES = (
    "You are a careful coding agent working in a large repository. Read the files you are given before "
    "you change them, keep each change small, run the tests after every edit, explain what you did in "
    "plain words, never invent an API, cite the file and line you rely on, and stop to ask when a request "
    "is ambiguous. Tools: read_file(path), write_file(path, text), run(command), search(query). "
)
QUESTIONS = [f"Task {i}: list the three files you would open first to fix bug #{100 + i}, and why." for i in range(REQUESTS)]


def system_prompt(tokenizer) -> str:
    """The rules repeated, numbered, to ~SYSTEM_TOKENS tokens of the served tokenizer."""
    parts, text = [], ""
    while len(tokenizer.encode(text)) < SYSTEM_TOKENS:
        parts.append(f"Rule set {len(parts) + 1}. {RULES}")
        text = "\n".join(parts)
    return text


def body(system: str, question: str) -> dict:
    return {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": OUTPUT_TOKENS,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }


async def one(client: httpx.AsyncClient, url: str, payload: dict) -> tuple[float, int, float]:
    """(seconds to the first content, content chunks, seconds to the end) of one streamed chat request."""
    started, first, chunks = time.perf_counter(), None, 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=payload) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            # a token's chunk, printed or not: the random weights pick padded-vocabulary tokens that print as ""
            if (choices[0].get("delta") or {}).get("content") is not None:
                chunks += 1
                first = first if first is not None else time.perf_counter() - started
    return first if first is not None else float("nan"), chunks, time.perf_counter() - started


async def agent_case(url: str, system: str) -> dict:
    async with httpx.AsyncClient(timeout=900) as client:
        await one(client, url, body(system, "Say ready."))  # the warm prefix
        started = time.perf_counter()
        results = await asyncio.gather(*(one(client, url, body(system, q)) for q in QUESTIONS))
        wall = time.perf_counter() - started
    tokens = REQUESTS * OUTPUT_TOKENS  # every request runs to max_tokens (ignore_eos)
    return {
        "output tok/s": round(tokens / wall, 2),
        "TTFT p50 s": round(statistics.median(first for first, _, _ in results), 2),
        "wall s": round(wall, 2),
        "content chunks": sum(chunks for _, chunks, _ in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the raw result here (JSON)")
    args = parser.parse_args()
    from .model_files import load_tokenizer
    from .shaped_qwen35 import shaped_qwen35

    gguf = str(shaped_qwen35())
    system = system_prompt(load_tokenizer())  # the file's tokenizer is the embedded one, padded
    row = {"file": gguf, "requests": REQUESTS, "output tokens": OUTPUT_TOKENS, "system tokens": SYSTEM_TOKENS}
    with EngineServer({"MINIVLLM_MODEL": gguf, "MINIVLLM_SPECULATIVE": "off"}) as ours:
        row["ours"] = asyncio.run(agent_case(ours.base_url, system))
    with LlamaServer(gguf, slots=REQUESTS, context=REQUESTS * 4096) as peer:  # a slot per request, 4,096 tokens each
        row["llama-server"] = {**asyncio.run(agent_case(peer.base_url, system)), "build": peer.build}
    row["ratio output tok/s"] = round(row["ours"]["output tok/s"] / row["llama-server"]["output tok/s"], 2)
    row["ratio TTFT p50"] = round(row["ours"]["TTFT p50 s"] / row["llama-server"]["TTFT p50 s"], 2)
    print(json.dumps(row, indent=2))
    if args.out:
        from .machine import machine_info

        with open(args.out, "w") as f:
            json.dump(
                {**row, "machine": machine_info(), "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=2
            )


if __name__ == "__main__":
    main()
