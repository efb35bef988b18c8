"""Many models, one server (issue 55): switching between models against llama-server's router.

One folder holds three real GGUFs: the embedded SmolLM2-135M (Q4_1), Qwen2.5-Coder-0.5B-Instruct
(`make test` fetches it) and Gemma 3 270M (Q4_K_M). Each server serves the folder with at most
one model loaded, so every request that names another model unloads one and loads the next:
ours with MINIVLLM_MODELS_DIR and MINIVLLM_MODELS_MAX=1 (otherwise its defaults), llama-server as
its router (`--models-dir`, `--models-max 1`; each model an instance of its own with the same
4 slots x 4,096 tokens ours gets). Each round asks each model in turn, twice over, for one
greedy completion of 8 tokens and times it from the request to the whole reply: a switch (the
old model out, the new one in, the prompt, 8 tokens). Memory is the server's resident size with
its children (llama-server runs each model in a child process) once settled after each switch.

    python -m bench.models_switch --rounds 2                  # ~4 min on 2 cores (builds llama-server once)
    python -m bench.models_switch --docs-dir docs/bench       # also docs/bench/raw/models.json and the page
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import httpx
import psutil

from .llama_server import LlamaServer, build_that_runs
from .machine import machine_info
from .raw import measured_line, publish
from .server import EngineServer

MODELS = ("qwen-coder", "gemma3", "smollm2")
PROMPT = "The three primary colours are"
TOKENS = 8
SLOTS, CONTEXT = 4, 4096


def folder_of_models() -> str:
    """A temporary folder with the three real GGUFs linked in."""
    from tests.support import real_gguf

    from .model_files import embedded_gguf

    folder = tempfile.mkdtemp(prefix="bench-models-")
    os.symlink(embedded_gguf(), os.path.join(folder, "smollm2.gguf"))
    os.symlink(str(real_gguf.QWEN25_CODER.present() or real_gguf.QWEN25_CODER.fetch()), os.path.join(folder, "qwen-coder.gguf"))
    os.symlink(str(real_gguf.GEMMA3.present() or real_gguf.GEMMA3.fetch()), os.path.join(folder, "gemma3.gguf"))
    return folder


class LlamaRouter(LlamaServer):
    """llama-server in router mode over a folder: no model of its own, each one loaded on demand."""

    def __init__(self, folder: str, **options):
        super().__init__("", **options)
        self.folder = folder

    @property
    def argv(self) -> list[str]:
        argv = super().argv
        at = argv.index("-m")
        del argv[at : at + 2]
        return [*argv, "--models-dir", self.folder, "--models-max", "1"]

    def __enter__(self):
        """The router's children run its own binary, and a child that crashes only fails its load: a
        plain server on one of the folder's files first finds the build that runs here (the native
        one, or the build without AMX where the native one dies: bench/llama_server.py)."""
        first = sorted(os.path.join(self.folder, name) for name in os.listdir(self.folder) if name.endswith(".gguf"))[0]
        with LlamaServer(first, slots=1, context=512):
            pass
        self.build = build_that_runs()
        return super().__enter__()


def tree_resident_mb(pid: int) -> float:
    process = psutil.Process(pid)
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def settled_tree_mb(pid: int, timeout: float = 15.0, steady_s: float = 2.0) -> float:
    """The tree's resident memory once it has held within 1 MB for `steady_s`: an unloaded model's
    memory goes back when its last reference does (ours: within about a second of the switch), so
    a shorter wait would count the model before it beside the one after."""
    deadline, last, since = time.monotonic() + timeout, tree_resident_mb(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = tree_resident_mb(pid)
        if abs(now - last) >= 1.0:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= steady_s:
            return now
    return last


def switches(base_url: str, pid: int) -> list[dict]:
    """Each model twice, in turn: one timed completion each, and the memory after it."""
    rows = []
    with httpx.Client(timeout=300) as client:
        for model in MODELS * 2:
            body = {"model": model, "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0}
            started = time.monotonic()
            resp = client.post(f"{base_url}/v1/completions", json=body)
            seconds = time.monotonic() - started
            ok = resp.status_code == 200 and bool(resp.json()["choices"][0]["text"])
            rows.append(
                {
                    "model": model,
                    "seconds": seconds if ok else None,
                    "status": resp.status_code,
                    "memory_mb": settled_tree_mb(pid),
                }
            )
    return rows


def one_round(folder: str, results_dir: str, r: int) -> dict:
    env = {"MINIVLLM_MODELS_DIR": folder, "MINIVLLM_MODELS_MAX": "1"}
    with EngineServer(env, log_path=os.path.join(results_dir, f"models-ours-{r}.log")) as ours:
        ours_rows, ours_command = switches(ours.base_url, ours._process.pid), ours.command
    with LlamaRouter(
        folder, slots=SLOTS, context=SLOTS * CONTEXT, log_path=os.path.join(results_dir, f"models-llama-{r}.log")
    ) as peer:
        peer_rows, peer_command = switches(peer.base_url, peer._process.pid), peer.command
    return {
        "ours": ours_rows,
        "llama": peer_rows,
        "ours_command": ours_command,
        "llama_command": peer_command,
        "llama_build": peer.build,
    }


def run(*, rounds: int, results_dir: str) -> dict:
    folder = folder_of_models()
    os.makedirs(results_dir, exist_ok=True)
    result = {"machine": machine_info(), "rounds": [one_round(folder, results_dir, r) for r in range(rounds)]}
    result["machine"]["load_average_at_end"] = os.getloadavg()
    return result


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _figure(value, digits=2, unit="") -> str:
    return "not measured" if value is None else f"{value:.{digits}f}{unit}"


def render(result: dict) -> list[str]:
    out = ["## Many models: switching between them against llama-server's router", ""]
    out += [measured_line(result["machine"], result.get("command")), ""]
    out += [
        "One folder of three real GGUFs, at most one model loaded: each request that names another "
        "model unloads one and loads the next. Seconds from the request to an 8-token reply, the "
        "median of each model's two switches per round; memory: the server with its children, "
        "settled after the switch.",
        "",
        "| model | round | ours, s | llama-server, s | ratio (theirs / ours) | ours, MB | llama-server, MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, one in enumerate(result["rounds"], 1):
        for model in MODELS:
            ours = [row for row in one["ours"] if row["model"] == model]
            theirs = [row for row in one["llama"] if row["model"] == model]
            ours_s, theirs_s = _median(row["seconds"] for row in ours), _median(row["seconds"] for row in theirs)
            ratio = theirs_s / ours_s if ours_s and theirs_s else None
            ours_mb, theirs_mb = _median(row["memory_mb"] for row in ours), _median(row["memory_mb"] for row in theirs)
            out.append(
                f"| {model} | {r} | {_figure(ours_s)} | {_figure(theirs_s)} | {_figure(ratio, unit='x')} "
                f"| {_figure(ours_mb, 0)} | {_figure(theirs_mb, 0)} |"
            )
    one = result["rounds"][0]
    out += ["", "```", one["ours_command"], one["llama_command"], "```", ""]
    if any(r["llama_build"] != "native" for r in result["rounds"]):
        out += ["llama-server ran a build without its native AMX path here: no ratio above judges anything.", ""]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/models.json and rewrite the page there")
    args = p.parse_args(argv)
    result = run(rounds=args.rounds, results_dir=args.results_dir)
    result["command"] = "python -m bench.models_switch " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(os.path.join(args.results_dir, "models.json"), "w") as out:
        json.dump(result, out, indent=1)
    print("\n".join(render(result)))
    if args.docs_dir:
        publish(args.docs_dir, "models", result)


if __name__ == "__main__":
    main()
