"""The GPU check (issue 33): one script, a few minutes, a JSON report of what the CUDA path does.

Run on a machine with a CUDA GPU, from the checkout and its `.venv` (it installs nothing and needs
no network): the embedded model, and any GGUF given with --model.

    python -m bench.gpu_check                                # writes bench/results/gpu_check.json
    python -m bench.gpu_check --device cpu --quick           # the same checks on the CPU's torch path (MINIVLLM_CPU_KERNELS=0)

What it reports, each in its own section (a section that fails records its error and the rest go on):
- device: name, compute capability, memory, torch / CUDA / Triton versions;
- load: seconds to a ready engine, the dtype chosen, the KV plan (blocks, pool MB, slots, context)
  and the GPU's memory after it;
- greedy: our greedy tokens on 8 prompts against HF's (transformers' model in the same dtype on the
  same device, teacher-forced on our tokens): how many are HF's choice, and how far the rest fall short;
- steps: at 1, 8 and 32 streams, decode step time (median), host synchronisations per step
  (torch.cuda.set_sync_debug_mode counts each) and kernels launched per step (torch.profiler),
  with CUDA graphs on (MINIVLLM_CUDA_GRAPHS=auto: one per batch size, captured at load) and off;
- http: output tok/s through a real Daphne server at 1, 8 and 32 clients;
- refusals: the CPU-only weight formats (MINIVLLM_QUANT=int4, q8_0, int8, bf16) must refuse CUDA.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

PROMPTS = [
    "The future of AI inference is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Paris is the capital of",
    "To make a cup of tea, first",
    "The largest planet in our solar system",
    "Water boils at a temperature of",
]
CPU_ONLY_FORMATS = ("int4", "q8_0", "int8", "bf16")


def section(report: dict, name: str):
    """Runs one check into report[name]; an exception is recorded, not raised."""

    def wrap(check):
        started = time.perf_counter()
        try:
            report[name] = check()
        except Exception as exc:  # the report says what failed; the other checks still run
            report[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        report.setdefault("seconds", {})[name] = round(time.perf_counter() - started, 2)
        print(f"{name}: {json.dumps(report[name])[:400]}", flush=True)
        return check

    return wrap


def device_facts(device: torch.device) -> dict:
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts |= {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gb": round(props.total_memory / 2**30, 1),
            "bf16": torch.cuda.is_bf16_supported(including_emulation=False),
        }
    else:
        facts["name"] = platform.processor() or platform.machine()
    return facts


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def start_decoding(engine, streams: int, prompt_len: int = 64, max_tokens: int = 200) -> None:
    """`streams` requests admitted and past their prefill: the next steps are decode-only."""
    from inference.engine.sample.sampling_params import SamplingParams

    ids = engine.tokenize(" ".join(["word"] * prompt_len))[:prompt_len]
    for i in range(streams):
        engine.add_request(f"s{streams}-{i}", ids, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
    while engine.scheduler.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in engine.scheduler.running):
        engine.step()


def finish(engine) -> None:
    for request_id in list(engine.requests):
        engine.abort(request_id)
    while engine.has_work():
        engine.step()


def step_figures(engine, device: torch.device, streams: int, steps: int) -> dict:
    start_decoding(engine, streams)
    times = []
    for _ in range(steps):
        synchronize(device)
        t0 = time.perf_counter()
        engine.step()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    figures = {"step_ms_p50": round(statistics.median(times) * 1000, 3), "tok_s": round(streams / statistics.median(times), 1)}
    if device.type == "cuda":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(4):
                    engine.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        figures["syncs_per_step"] = sum("synchroniz" in str(w.message) for w in caught) / 4
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                engine.step()
            synchronize(device)
        on_gpu = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        copies = sum(name.startswith(("Memcpy", "Memset")) for name in on_gpu)
        figures["kernels_per_step"] = (len(on_gpu) - copies) / 4
        figures["copies_per_step"] = copies / 4
    finish(engine)
    return figures


@torch.no_grad()
def greedy_agreement(engine, model_path: str | None, device: torch.device, tokens: int) -> dict:
    """Our greedy replies, and where each token stands in HF's logits after the same tokens."""
    from transformers import AutoModelForCausalLM

    from inference.engine.loader import embedded_model_source
    from inference.engine.sample.sampling_params import SamplingParams

    if model_path is None:
        source = embedded_model_source()
        hf = AutoModelForCausalLM.from_pretrained(source.path, gguf_file=source.gguf_file, dtype=torch.float32)
    elif model_path.endswith(".gguf"):
        folder, name = os.path.split(os.path.abspath(model_path))
        hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    else:
        hf = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    hf = hf.to(device=device, dtype=engine.bundle.dtype).eval()
    prompts = [engine.tokenize(p) for p in PROMPTS]
    for i, ids in enumerate(prompts):
        engine.add_request(f"g{i}", ids, SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True))
    replies = {i: [] for i in range(len(prompts))}
    while engine.has_work():
        for out in engine.step():
            replies[int(out.request_id[1:])].extend(out.token_ids)
    agreeing, total, shortfalls = 0, 0, []
    for i, ids in enumerate(prompts):
        ours = replies[i]
        logits = hf(torch.tensor([ids + ours], device=device)).logits[0, len(ids) - 1 : -1].float()
        short = logits.max(1).values - logits.gather(1, torch.tensor(ours, device=device)[:, None])[:, 0]
        agreeing += int((short == 0).sum())
        total += len(ours)
        shortfalls += [round(float(s), 4) for s in short if s > 0]
    del hf
    return {
        "dtype": str(engine.bundle.dtype).removeprefix("torch."),
        "tokens": total,
        "hf_choice": agreeing,
        "agreement": round(agreeing / total, 4),
        "largest_shortfall": max(shortfalls, default=0.0),
        "shortfalls": shortfalls[:20],
    }


def http_throughput(model: str | None, device: str, quick: bool) -> dict:
    from .model_files import load_tokenizer
    from .prompts import make_requests
    from .serve import run_benchmark
    from .server import EngineServer

    env = {"MINIVLLM_DEVICE": device} | ({"MINIVLLM_MODEL": model} if model else {})
    if device == "cpu":
        env["MINIVLLM_CPU_KERNELS"] = "0"
    tokenizer = load_tokenizer()
    figures = {}
    with EngineServer(env) as server:
        figures["ready_s"] = server.ready_s
        for clients in (1, 8) if quick else (1, 8, 32):
            requests = make_requests(tokenizer, num_prompts=clients * 2, input_len="32-64", output_len=64, seed=clients)
            result = asyncio.run(
                run_benchmark(requests, base_url=server.base_url, concurrency=clients, ignore_eos=True, show_progress=False)
            )
            summary = result["summary"]
            figures[f"{clients} clients"] = {
                "tok_s": round(summary["output_throughput"], 1),
                "failed": summary["failed"],
                "itl_ms_p50": summary["itl_ms"]["p50"],
            }
    return figures


def refusals(model: str | None, device: str) -> dict:
    from inference.engine.config import EngineConfig
    from inference.engine.loader import load_model

    answers = {}
    for fmt in CPU_ONLY_FORMATS:
        try:
            load_model(EngineConfig(model=model, device=device, quantization=fmt))
            answers[fmt] = {"refused": False}
        except ValueError as exc:
            answers[fmt] = {"refused": True, "message": str(exc)}
    return answers


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (the check), or cpu to try the script on the torch path")
    p.add_argument("--model", default=None, help="a GGUF or HF folder; default: the embedded SmolLM2-135M")
    p.add_argument("--quick", action="store_true", help="fewer streams, steps and tokens")
    p.add_argument("--out", default="bench/results/gpu_check.json")
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ["MINIVLLM_CPU_KERNELS"] = "0"  # the device-generic path CUDA takes
    from inference.engine.config import EngineConfig
    from inference.engine.engine import LLMEngine

    device = torch.device(args.device)
    report: dict = {"argv": argv if argv is not None else sys.argv[1:]}
    engine = None

    @section(report, "device")
    def _():
        return device_facts(device)

    @section(report, "load")
    def _():
        nonlocal engine
        started = time.perf_counter()
        engine = LLMEngine(EngineConfig(model=args.model, device=args.device))
        facts = {
            "ready_s": round(time.perf_counter() - started, 2),
            "dtype": str(engine.bundle.dtype).removeprefix("torch."),
            "weights": engine.bundle.weights_format,
            "kv_blocks": engine.kv_cache.num_blocks,
            "kv_pool_mb": round(engine.model_runner.kv_pool_bytes / 2**20, 1),
            "kv_dtype": str(engine.kv_dtype).removeprefix("torch."),
            "slots": engine.num_slots,
            "max_model_len": engine.max_model_len,
            "decode_attention": engine.model_runner.decode_attention.__name__,
            "cuda_graphs": sorted(engine.model_runner.static_decode.graphs) if engine.model_runner.static_decode else [],
        }
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            facts |= {
                "gpu_used_mb": round((total - free) / 2**20, 1),
                "torch_reserved_mb": round(torch.cuda.memory_reserved(device) / 2**20, 1),
            }
        return facts

    @section(report, "greedy")
    def _():
        return greedy_agreement(engine, args.model, device, 16 if args.quick else 32)

    @section(report, "steps")
    def _():
        streams = (1, 8) if args.quick else (1, 8, 32)
        runner = engine.model_runner
        static = runner.static_decode  # CUDA under MINIVLLM_CUDA_GRAPHS=auto: its graphs captured at load
        modes = {"graphs on": static} if static is not None and static.graphs else {}
        modes["graphs off"] = None
        figures = {}
        try:
            for n in streams:
                for name, mode in modes.items():
                    runner.static_decode = mode
                    figures.setdefault(f"{n} streams", {})[name] = step_figures(engine, device, n, 8 if args.quick else 32)
        finally:
            runner.static_decode = static
        return figures

    engine = None  # its memory back before a server loads the model again
    if device.type == "cuda":
        torch.cuda.empty_cache()

    @section(report, "http")
    def _():
        return http_throughput(args.model, args.device, args.quick)

    @section(report, "refusals")
    def _():
        if device.type != "cuda":
            return {"skipped": "the CPU runs every format"}
        return refusals(args.model, args.device)

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"report: {args.out}")
    return report


if __name__ == "__main__":
    main()
