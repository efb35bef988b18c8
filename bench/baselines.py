"""HF `transformers` baselines over the same prompts as bench/serve.py (the product never calls them).

Two ways to serve without our engine: (a) one request at a time; (b) static batches of the
serving run's concurrency, left-padded, each batch running until its longest member is done.
With mixed output lengths only the tokens each request wanted count as output: the steps spent
on finished members are the waste continuous batching removes. float32 and bfloat16.

    python -m bench.baselines --num-prompts 16 --input-len 128 --output-len 16-256 \
        --batch-size 8 --dtypes float32,bfloat16 --one-at-a-time-prompts 4
"""

from __future__ import annotations

import argparse
import datetime
import json
import time

import torch
from tqdm import tqdm

from .hf_generate import generate_batch, prepare
from .metrics import per_request, summarize
from .prompts import BenchRequest, make_requests


def run_static(model, tokenizer, requests: list[BenchRequest], *, batch_size: int, show_progress: bool = False) -> dict:
    """Batches of `batch_size` in order; batch_size 1 is the one-at-a-time baseline."""
    records, computed = [], 0
    batches = [requests[i : i + batch_size] for i in range(0, len(requests), batch_size)]
    started = time.perf_counter()
    for batch in tqdm(batches, desc=f"hf batch={batch_size}", disable=not show_progress, leave=False):
        batch_records, batch_computed = generate_batch(model, tokenizer, batch)
        records += batch_records
        computed += batch_computed
    duration = time.perf_counter() - started
    summary = summarize(records, duration)
    summary["computed_tokens"] = computed
    summary["padding_waste"] = 1.0 - summary["total_output_tokens"] / computed if computed else 0.0
    config = {
        "backend": "hf-generate",
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "batch_size": batch_size,
        "num_prompts": len(requests),
        "torch_threads": torch.get_num_threads(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    return {"config": config, "summary": summary, "requests": per_request(records)}


def load_model(dtype: str, tokenizer, folder: str | None = None):
    """The HF model in `dtype`, warmed up and with the tokenizer set for left padding."""
    from .model_files import load_hf_model

    model = load_hf_model(dtype, folder)
    prepare(model, tokenizer)
    return model


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-folder", default=None, help="local HF model folder (default: embedded SmolLM2 GGUF)")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--input-len", default="128")
    parser.add_argument("--output-len", default="64")
    parser.add_argument("--batch-size", type=int, default=8, help="static batch size (the serving run's concurrency)")
    parser.add_argument("--one-at-a-time-prompts", type=int, default=4, help="the first N prompts one at a time (0: skip)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--result-json", default=None)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    from .model_files import load_tokenizer
    from .serve import format_summary

    args = parse_args(argv)
    tokenizer = load_tokenizer(args.model_folder)
    requests = make_requests(
        tokenizer, num_prompts=args.num_prompts, input_len=args.input_len, output_len=args.output_len, seed=args.seed
    )
    results = {}
    for dtype in args.dtypes.split(","):
        model = load_model(dtype, tokenizer, args.model_folder)
        runs = {f"static-{args.batch_size}": (requests, args.batch_size)}
        if args.one_at_a_time_prompts:
            runs["one-at-a-time"] = (requests[: args.one_at_a_time_prompts], 1)
        for name, (subset, batch_size) in runs.items():
            result = run_static(model, tokenizer, subset, batch_size=batch_size, show_progress=True)
            result["config"].update(input_len=args.input_len, output_len=args.output_len, seed=args.seed)
            results[f"{dtype}/{name}"] = result
            print(f"== HF {dtype} {name}: padding waste {result['summary']['padding_waste']:.0%}")
            print(format_summary(result["summary"]))
        del model
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"result written to {args.result_json}")
    return results


if __name__ == "__main__":
    main()
