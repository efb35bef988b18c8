"""Numerics held against float32, not against a peer's near-ties: for each real test GGUF (Gemma 3
270M Q4_K_M, Qwen2.5-Coder-0.5B's AWQ release in a Q4_K_M mix), teacher-forced over the same
512 positions of natural prose (bench/numerics_text.txt), how often each server's greedy next
token is the one transformers' float32 model picks over the same de-quantized weights, and by
what float32 margin (its top logit less the logit of the server's choice) where they part.

Free-running greedy text is a poor judge on a small model: one near-tie and the replies part for
good. Teacher-forced, every position is judged on its own, and the margin says whether a parting
was a near-tie (both choices all but equal in float32) or an error.

- Ours: one /v1/completions request with the text as token ids and `prompt_logprobs: 2`, i.e.
  the top two at every position of the prefill, through the server's own chunked path (its
  prefill, where llama-server's figure below is its one-token steps: our own prefill and decode
  part at near-ties too, docs/models.md).
- llama-server: one /completion request per position (the prefix as ids, one token, `n_probs:
  2`); its prompt cache makes each a one-token step on top of the last.
- Float32: transformers' model class over our de-quantized tensors (tests/support/gguf_reference.py;
  the de-quantizer is held to gguf-py's bit for bit in tests/engine/gguf/test_dequantize.py).

The target: ours takes float32's top token at least as often as llama-server, within a point
(both quantize activations to int8 blocks, so both part from float32 at near-ties).

    python -m bench.numerics                       # both files; prints the table (~3 min on 2 cores)
    python -m bench.numerics --docs-dir docs/bench   # also docs/bench/raw/numerics.json and the page rewritten
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import httpx

from .llama_server import LlamaServer, build, build_that_runs
from .raw import measured_line, publish
from .server import EngineServer

TEXT = Path(__file__).with_name("numerics_text.txt")
POSITIONS = 512  # judged positions: the text's first POSITIONS + 1 tokens
NEAR_TIE = 0.5  # float32 logits: a parting within this is a near-tie
TARGET_POINTS = 1.0  # ours at most this many percentage points below llama-server's agreement


def text_ids(gguf: str, positions: int = POSITIONS) -> list[int]:
    """The text's first `positions` + 1 tokens as the file's tokenizer writes a prompt (its BOS where it adds one)."""
    from inference.engine.gguf.checkpoint import GGUFCheckpoint

    ids = GGUFCheckpoint.open(gguf).tokenizer(TEXT.read_text())["input_ids"]
    if len(ids) < positions + 1:
        raise ValueError(f"{TEXT.name} is {len(ids)} tokens for this tokenizer; {positions + 1} are needed")
    return ids[: positions + 1]


def float32_logits(gguf: str, ids: list[int], model=None):
    """[positions, vocab] float32 logits: row i is the prediction of ids[i + 1] (`model`: the
    file's float32 reference, where one is already built)."""
    import torch

    from tests.support.gguf_reference import reference_model

    model = model if model is not None else reference_model(gguf)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, :-1].float()


def ours_choices(base_url: str, ids: list[int]) -> list[tuple[int, float]]:
    """(our greedy token, its lead over our second) at each position, from the prefill's prompt_logprobs."""
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2}
    reply = httpx.post(f"{base_url}/v1/completions", json=body, timeout=600)
    reply.raise_for_status()
    choices = []
    for entry in reply.json()["choices"][0]["prompt_logprobs"][1:]:  # position 0 has no prediction
        ranked = sorted((v["rank"], int(k), v["logprob"]) for k, v in entry.items() if v["rank"] is not None)
        choices.append((ranked[0][1], ranked[0][2] - ranked[1][2]))
    return choices


def llama_choices(base_url: str, ids: list[int]) -> list[tuple[int, float]]:
    """(llama-server's greedy token, its lead over its second) after each prefix."""
    choices = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for end in range(1, len(ids)):
            body = {"prompt": ids[:end], "n_predict": 1, "temperature": 0, "n_probs": 2, "cache_prompt": True}
            [probs] = client.post("/completion", json=body).json()["completion_probabilities"]
            top = probs["top_logprobs"]
            choices.append((top[0]["id"], top[0]["logprob"] - top[1]["logprob"]))
    return choices


def compare(choices: list[tuple[int, float]], logits) -> dict:
    """How the server's choices stand against float32's: agreement, and float32's margin where they part."""
    if len(choices) != logits.shape[0]:
        raise ValueError(f"{len(choices)} choices for {logits.shape[0]} positions")
    best = logits.argmax(-1).tolist()
    parted = []
    for position, ((token, gap), top) in enumerate(zip(choices, best)):
        if token != top:
            margin = float(logits[position, top] - logits[position, token])
            parted.append({"position": position + 1, "float32_margin": margin, "server_gap": gap})
    margins = [p["float32_margin"] for p in parted]
    return {
        "positions": len(choices),
        "agree": len(choices) - len(parted),
        "percent": 100.0 * (len(choices) - len(parted)) / len(choices),
        "parted": parted,
        "median_margin": statistics.median(margins) if margins else None,
        "max_margin": max(margins, default=None),
        "above_near_tie": sum(m > NEAR_TIE for m in margins),
    }


def one_file(real, results_dir: str) -> dict:
    gguf = str(real.present() or real.fetch())
    ids = text_ids(gguf)
    logits = float32_logits(gguf, ids)
    out = {"label": real.label, "file": real.name, "tokens": len(ids)}
    stem = real.name.split(".gguf")[0]
    with EngineServer({"MINIVLLM_MODEL": gguf}, log_path=os.path.join(results_dir, f"numerics-ours-{stem}.log")) as ours:
        out["ours"] = compare(ours_choices(ours.base_url, ids), logits)
    log = os.path.join(results_dir, f"numerics-llama-{stem}.log")
    with LlamaServer(gguf, slots=1, context=2048, log_path=log) as peer:
        out["llama-server"] = compare(llama_choices(peer.base_url, ids), logits)
        out["build"] = peer.build
    return out


def run(*, results_dir: str) -> dict:
    from tests.support.real_gguf import FILES

    from .machine import machine_info

    build(build_that_runs())
    result = {"machine": machine_info(), "command": "python -m bench.numerics", "text": TEXT.name}
    result["files"] = [one_file(real, results_dir) for real in FILES]
    return result


def level_with(ours: dict, theirs: dict) -> bool:
    """The target: our agreement with float32 at most TARGET_POINTS below the peer's."""
    return ours["percent"] >= theirs["percent"] - TARGET_POINTS


def verdict(file: dict) -> str:
    met = level_with(file["ours"], file["llama-server"])
    if file.get("build", "native") != "native":
        return "not judged: peer rebuilt" if met else "not met (peer rebuilt)"
    return "met" if met else "not met"


def render(result: dict) -> list[str]:

    lines = [
        "## Numerics: teacher-forced agreement with float32",
        "",
        f"Each server's greedy next token at each of {POSITIONS} positions of natural prose (bench/{result['text']}), "
        "the text given as token ids, against transformers' float32 model over the same de-quantized weights; where "
        f"they part, float32's margin between its choice and the server's (a near-tie below {NEAR_TIE} logits). "
        f"Target: ours at least llama-server's agreement, within {TARGET_POINTS:.0f} point.",
        "",
        measured_line(result.get("machine") or {}, result.get("command")),
        "",
        "| file | server | float32's top token | parted | float32 margin where parted: median, max | above "
        f"{NEAR_TIE} | verdict |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for file in result["files"]:
        for side in ("ours", "llama-server"):
            figures = file[side]
            margins = (
                f"{figures['median_margin']:.2f}, {figures['max_margin']:.2f}" if figures["median_margin"] is not None else "–"
            )
            name = side if side == "ours" or file.get("build", "native") == "native" else f"{side} ({file['build']})"
            lines.append(
                f"| {file['label']} | {name} | {figures['percent']:.1f}% ({figures['agree']} of {figures['positions']}) | "
                f"{figures['positions'] - figures['agree']} | {margins} | {figures['above_near_tie']} | "
                f"{verdict(file) if side == 'ours' else ''} |"
            )
    return lines + [""]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results-dir", default="bench/results")
    p.add_argument("--docs-dir", default=None, help="also write DOCS_DIR/raw/numerics.json and rewrite the page there")
    args = p.parse_args(argv)
    os.makedirs(args.results_dir, exist_ok=True)
    result = run(results_dir=args.results_dir)
    with open(os.path.join(args.results_dir, "numerics.json"), "w") as out:
        json.dump(result, out, indent=1)
    if args.docs_dir:
        publish(args.docs_dir, "numerics", result)
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
