"""Start and memory against llama-server on the 262k-vocabulary hybrid families (issue 65 parts 4 and
5): Qwen3.5-2B's and Gemma 4 E2B's shapes in Q4_K_M (bench/shaped_qwen35.py, bench/shaped_gemma4.py:
random weights, llama.cpp's own converter and llama-quantize), each server started alone on the same
file, one after the other in each round (ours first), judged per round: ready <= 1.5x llama-server's,
resident memory after load <= 1x.

Ours runs with no settings (and again at a 32,768-token context, MINIVLLM_MAX_MODEL_LEN=32768), after
one start that packs the file's blocks into its packed cache, so the start measured is the one a
user makes every day after; llama-server with the bench's `-np 32 -c 32768` (bench/llama_server.py).
Loads are bench/peer_qwen35.py's and bench/peer_gemma4.py's; this is their start rows alone, in
minutes rather than an hour.

    python -m bench.start_memory --rounds 2 --docs-dir docs/bench   # docs/bench/raw/start_memory.json
"""

from __future__ import annotations

import argparse
import os

from .llama_server import LlamaServer, build, build_that_runs
from .raw import write_raw
from .server import EngineServer

TARGETS = {"ready": 1.5, "memory": 1.0}  # ours / llama-server, at most
STATS = ("weights_mb", "kv_pool_mb", "state_pool_mb", "max_model_len", "kv_blocks_total")


def files() -> dict[str, str]:
    from .shaped_gemma4 import shaped_gemma4
    from .shaped_qwen35 import shaped_qwen35

    return {"qwen3.5-2b shape": str(shaped_qwen35()), "gemma-4-e2b shape": str(shaped_gemma4())}


def ours(gguf: str, extra: dict, log: str) -> dict:
    env = {"MINIVLLM_MODEL": gguf, "MINIVLLM_SPECULATIVE": "off", **extra}
    with EngineServer(env, log_path=log + "-first"):
        pass  # packs the blocks once (gguf/packed_cache.py)
    with EngineServer(env, log_path=log) as server:
        figures = {"ready s": server.ready_s, "resident MB": server.resident_after_load_mb(), "settings": extra}
        return {**figures, **{key: server.stats.get(key) for key in STATS}}


def peer(gguf: str, log: str) -> dict:
    with LlamaServer(gguf, log_path=log) as server:
        return {"ready s": server.ready_s, "resident MB": server.resident_after_load_mb(), "command": server.command}


def one_round(gguf: str, name: str, r: int, results_dir: str) -> dict:
    log = lambda side: os.path.join(results_dir, f"start-{name.split()[0]}-{side}-{r}.log")  # noqa: E731
    return {
        "ours": ours(gguf, {}, log("ours")),
        "ours, 32k context": ours(gguf, {"MINIVLLM_MAX_MODEL_LEN": "32768"}, log("ours-32k")),
        "llama-server": peer(gguf, log("llama")),
    }


def verdict_rows(result: dict) -> list[str]:
    lines = [
        "| model | ours | ready s (llama-server) | ratio | resident MB (llama-server) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, rounds in result["models"].items():
        for side in ("ours", "ours, 32k context"):
            ready = [r[side]["ready s"] / r["llama-server"]["ready s"] for r in rounds]
            memory = [r[side]["resident MB"] / r["llama-server"]["resident MB"] for r in rounds]
            ok = lambda ratios, key: "met" if all(x <= TARGETS[key] for x in ratios) else "NOT met"  # noqa: E731
            lines.append(
                f"| {name} | {side} | "
                + ", ".join(f"{r[side]['ready s']:.2f} ({r['llama-server']['ready s']:.2f})" for r in rounds)
                + f" | {', '.join(f'{x:.2f}x' for x in ready)} ({ok(ready, 'ready')}) | "
                + ", ".join(f"{r[side]['resident MB']:.0f} ({r['llama-server']['resident MB']:.0f})" for r in rounds)
                + f" | {', '.join(f'{x:.2f}x' for x in memory)} ({ok(memory, 'memory')}) |"
            )
    return lines


def main(argv=None) -> None:
    from .machine import machine_info

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/start_memory.json")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    build(build_that_runs())
    result = {"machine": machine_info(), "command": f"python -m bench.start_memory --rounds {args.rounds}", "models": {}}
    for name, gguf in files().items():
        result["models"][name] = [one_round(gguf, name, r, args.results_dir) for r in range(args.rounds)]
    if args.docs_dir:
        print(f"wrote {write_raw(args.docs_dir, 'start_memory', result)}")
    print("\n".join(verdict_rows(result)))


if __name__ == "__main__":
    main()
