"""A model of a real shape against llama.cpp, as bench/peer_qwen35.py and bench/peer_gemma4.py measure it:
the file (random weights, llama.cpp's own converter and llama-quantize) served by ours and by
llama-server, one after the other in each round (ours first), speculation off on both sides (ours:
MINIVLLM_SPECULATIVE=off and nothing else; llama-server speculates only when asked), each figure a
ratio to llama-server's in the same round and judged against issue 53's targets. What differs per
model (its file, its tokenizer, the page's words for it) is a `Shaped`; the loads, the targets, the
round, the table and the files written are the same.

Loads, as bench/peer_moe.py's: one client (the chat questions, 32 output tokens; the weights are
random, so the text is too, but speed does not depend on it), 8 and 32 clients of random words, a
2,000-token prompt's prefill (llama-server given one slot of 8,192 for it), ready time, resident
memory after load, each server started with no settings but those. Ours is started once before the
measured start: a file's first start packs its blocks and caches them for the next
(gguf/packed_cache.py), so the start measured is the one a user makes every day after.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from .llama_server import LlamaServer, build, build_that_runs
from .peer import _measure, prompts_used
from .peer_large import _cell, latency_rows, rebuilt_peer, target_rows, with_prefill_rate
from .prompts import CHAT
from .raw import measured_line, write_raw
from .server import EngineServer

LOADS = (  # name, concurrency, prompts, input tokens (CHAT: chat questions), output tokens
    ("1 client", 1, 4, CHAT, "32"),
    ("8 clients", 8, 16, "8-40", "32"),
    ("32 clients", 32, 32, "8-40", "32"),
)
PREFILL = ("2,000-token prompt", 1, 2, "2000", "1")
TARGETS = {  # (load, figure): (target ratio to llama-server, higher is better): issue 53
    ("1 client", "tok/s"): (1.0, True),
    ("8 clients", "tok/s"): (2.0, True),
    ("32 clients", "tok/s"): (2.0, True),
    ("2,000-token prompt", "prefill tok/s"): (1.5, True),
    ("start", "ready s"): (1.5, False),
    ("start", "resident MB after load"): (1.0, False),
}
OURS_ENV = {"MINIVLLM_SPECULATIVE": "off"}  # with MINIVLLM_MODEL, the only settings
STATS_KEPT = ("weights_mb", "kv_pool_mb", "kv_blocks_total", "num_slots", "weights", "speculative")  # ours, from /stats


@dataclass(frozen=True)
class Shaped:
    """One model's bench: its file, its tokenizer and what the page says of it."""

    name: str  # "qwen35": bench/peer_<name>.py, the logs', the raw result's and the page's name
    doc: str  # that module's docstring: its first paragraph describes the command line
    heading: str  # the table's title (markdown)
    shape: str  # what the file is, in parentheses after its name
    memory: str  # what each server plans or holds after load, in parentheses after "Memory: ..."
    one_client: str  # how the one-client load sends the chat questions, after "chat questions"
    seed: int
    gguf: Callable[[], object]  # the file's path, the file made the first time
    tokenizer: Callable[[str], object]  # the requests' tokenizer, given the file's path

    @property
    def module(self) -> str:
        return f"bench.peer_{self.name}"


def one_round(spec: Shaped, tokenizer, gguf: str, r: int, results_dir: str) -> dict:
    row = {}
    log = lambda name: os.path.join(results_dir, f"{spec.name}-{name}-{r}.log")  # noqa: E731
    env = {"MINIVLLM_MODEL": gguf, **OURS_ENV}
    seed = spec.seed + r
    with EngineServer(env, log_path=log("ours-first")) as ours:  # packs the blocks once (the packed cache)
        first = {"earlier start's ready s": ours.ready_s}
    with EngineServer(env, log_path=log("ours")) as ours:
        start = {"ready s": ours.ready_s, "command": ours.command, **first}
        start["resident MB after load"] = ours.resident_after_load_mb()
        start.update({k: ours.stats.get(k) for k in STATS_KEPT if k in ours.stats})
        row["ours"] = {"start": start}
        row["ours"].update({load[0]: _measure(ours.base_url, tokenizer, load, seed=seed) for load in LOADS})
        row["ours"][PREFILL[0]] = with_prefill_rate(_measure(ours.base_url, tokenizer, PREFILL, seed=seed))
        row["ours"]["start"]["resident MB after the loads"] = ours.resident_mb()
    with LlamaServer(gguf, log_path=log("llama")) as peer:
        start = {"ready s": peer.ready_s, "command": peer.command, "build": peer.build}
        start["resident MB after load"] = peer.resident_after_load_mb()
        row["llama-server"] = {"start": start}
        row["llama-server"].update({load[0]: _measure(peer.base_url, tokenizer, load, seed=seed) for load in LOADS})
        row["llama-server"]["start"]["resident MB after the loads"] = peer.resident_mb()
    with LlamaServer(gguf, slots=1, context=8192, log_path=log("llama-prefill")) as peer:
        row["llama-server"][PREFILL[0]] = with_prefill_rate(_measure(peer.base_url, tokenizer, PREFILL, seed=seed))
        row["llama-server"]["start"]["prefill command"] = peer.command
    return row


def render(spec: Shaped, result: dict) -> list[str]:
    rounds = result["rounds"]
    rebuilt, caveat = rebuilt_peer(rounds)
    lines = [
        spec.heading,
        "",
        f"`{os.path.basename(result['gguf'])}` ({spec.shape}); CPU flags: {result.get('isa', '?')}. Ours: "
        f"`{rounds[0]['ours']['start']['command']}`; llama-server: `{rounds[0]['llama-server']['start']['command']}` "
        f"(no speculation unless asked). Memory: each server's resident memory after load with those settings "
        f"({spec.memory}). One client: bench/prompts.py's chat questions {spec.one_client}; the other loads: seeded "
        "random words. The weights are random, so the text is too; speed does not depend on it.",
        "",
        measured_line(result.get("machine") or {}, result.get("command")),
        "",
    ]
    if rebuilt:
        lines += [f"**llama-server ran {', '.join(rebuilt)} here, not its native build: no target below counts as met.**", ""]
    lines += target_rows(rounds, TARGETS, rebuilt, caveat)
    after = [[r[side]["start"].get("resident MB after the loads") for r in rounds] for side in ("llama-server", "ours")]
    lines.append(f"| end | resident MB after the loads | {_cell(after[0], 0)} | {_cell(after[1], 0)} | | | |")
    lines += latency_rows(rounds, (*LOADS, PREFILL))  # the latencies beside the targets
    return lines + [""]


def run(spec: Shaped, *, rounds: int, results_dir: str) -> dict:
    """Each round's figures for both servers."""
    from .machine import machine_info

    build(build_that_runs())
    gguf = str(spec.gguf())
    tokenizer = spec.tokenizer(gguf)
    machine = machine_info()
    result = {
        "gguf": gguf,
        "gguf_bytes": os.path.getsize(gguf),
        "rounds": [],
        "machine": machine,
        "command": f"python -m {spec.module}",
        "isa": " ".join(machine["isa_flags"]),
        "prompts": prompts_used((*LOADS, PREFILL)),
        "ours_settings": OURS_ENV,
    }
    for r in range(rounds):
        result["rounds"].append(one_round(spec, tokenizer, gguf, r, results_dir))
        print(f"{spec.name} round {r + 1} done", flush=True)
    return result


def save(spec: Shaped, docs_dir: str, result: dict) -> list[str]:
    """DOCS_DIR/raw/<name>.json (bench/raw.py's write_raw) and DOCS_DIR/<name>.md, the table rendered
    from it; the shared page is left alone."""
    raw = write_raw(docs_dir, spec.name, result)
    page = os.path.join(docs_dir, f"{spec.name}.md")
    with open(page, "w") as f:
        f.write(f"<!-- generated by python -m {spec.module} from raw/{spec.name}.json: do not edit -->\n\n")
        f.write("\n".join(render(spec, result)))
    return [raw, page]


def main(spec: Shaped, argv=None) -> None:
    p = argparse.ArgumentParser(description=spec.doc.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help=f"also write DOCS_DIR/raw/{spec.name}.json and DOCS_DIR/{spec.name}.md")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    result = run(spec, rounds=args.rounds, results_dir=args.results_dir)
    result["command"] = f"python -m {spec.module}" + (f" --rounds {args.rounds}" if args.rounds != 1 else "")
    with open(os.path.join(args.results_dir, f"peer-{spec.name}.json"), "w") as out:
        json.dump(result, out, indent=1)
    if args.docs_dir:
        print("wrote " + ", ".join(save(spec, args.docs_dir, result)))
    print("\n".join(render(spec, result)))
