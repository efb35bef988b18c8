"""The engine alone, no HTTP: decode-step latency and throughput, optionally profiled.

Separates what the engine costs from what the serving path adds (compare with `bench.serve`
at the same concurrency), and is what docs/performance-log.md's step-by-step figures come from.

    python -m bench.engine_step --concurrency 1                              # single-stream ITL, the default format
    python -m bench.engine_step --concurrency 32 --profile docs/bench/profiles/x.txt  # pyinstrument of the decode steps
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from inference.engine.config import EngineConfig
from inference.engine.engine import LLMEngine
from inference.engine.sample.sampling_params import SamplingParams

from .metrics import describe_ms
from .prompts import make_requests


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--input-len", default="8-40")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--dtype", default=None, help="default: MINIVLLM_DTYPE, else auto")
    p.add_argument("--quant", default=None, help="default: MINIVLLM_QUANT, else auto")
    p.add_argument("--kv-cache-dtype", default=None, help="default: MINIVLLM_KV_CACHE_DTYPE, else auto")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's own)")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after one warm-up round")
    p.add_argument("--profile", default=None, help="write a pyinstrument text profile of the timed rounds here")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def run_round(engine: LLMEngine, requests, output_len: int, tag: str) -> dict:
    """Adds every request at once and steps until all finish; times each step by kind."""
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    for i, req in enumerate(requests):
        engine.add_request(f"{tag}-{i}", engine.tokenize(req.prompt), params)
    decode_s, prefill_s, tokens = [], [], 0
    start = time.perf_counter()
    while engine.has_work():
        prefills = engine.scheduler.waiting or any(s.num_uncomputed_tokens > 1 for s in engine.scheduler.running)
        t0 = time.perf_counter()
        outputs = engine.step()
        (prefill_s if prefills else decode_s).append(time.perf_counter() - t0)
        tokens += sum(len(o.token_ids) for o in outputs)
    duration = time.perf_counter() - start
    return {"tokens": tokens, "duration_s": duration, "decode_s": decode_s, "prefill_s": prefill_s}


def measure(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    flags = {"dtype": args.dtype, "quantization": args.quant, "kv_cache_dtype": args.kv_cache_dtype}
    # the MINIVLLM_* environment (MINIVLLM_CPU_ISA included), then the flags given
    config = dataclasses.replace(
        EngineConfig.from_env(), max_num_seqs=args.concurrency, **{k: v for k, v in flags.items() if v is not None}
    )
    engine = LLMEngine(config)
    requests = make_requests(
        engine.tokenizer, num_prompts=args.concurrency, input_len=args.input_len, output_len=args.output_len, seed=args.seed
    )
    run_round(engine, requests, args.output_len, "warmup")
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
    rounds = [run_round(engine, requests, args.output_len, f"r{i}") for i in range(args.rounds)]
    if profiler:
        profiler.stop()
        with open(args.profile, "w") as f:
            f.write(profiler.output_text(unicode=True, color=False, show_all=False))
    tokens = sum(r["tokens"] for r in rounds)
    duration = sum(r["duration_s"] for r in rounds)
    decode = [t for r in rounds for t in r["decode_s"]]
    return {
        "concurrency": args.concurrency,
        "dtype": engine.dtype,
        "quant": config.quantization,
        "threads": torch.get_num_threads(),
        "output_tok_s": tokens / duration,
        "decode_step_ms": describe_ms(decode),
        "prefill_steps": sum(len(r["prefill_s"]) for r in rounds),
    }


def main(argv=None) -> None:
    print(json.dumps(measure(parse_args(argv)), indent=1))


if __name__ == "__main__":
    main()
