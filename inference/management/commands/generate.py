"""`manage.py generate --prompt ...`: one completion through LLMEngine's token loop, with its speed.

It drives LLMEngine directly (add_request + step until done), the way the serving thread does,
and prints the model, device and dtype, the streamed completion, its token count and tokens/s:
the quickest check that a machine, a model and the kernels work. `runengine --prompt` is the
same command under the name the README first gave it.
"""

from __future__ import annotations

import dataclasses
import time

from django.core.management.base import BaseCommand, CommandError

from inference.engine.config import EngineConfig
from inference.engine.sample.sampling_params import SamplingParams, SamplingParamsError


class Command(BaseCommand):
    help = "Generate one completion for --prompt and report tokens/s."
    prompt_required = True

    def add_arguments(self, parser):
        parser.add_argument("--prompt", required=self.prompt_required, default=None, help="the prompt to complete")
        parser.add_argument("--max-tokens", type=int, default=60)
        parser.add_argument("--temperature", type=float, default=0.7)
        parser.add_argument("--top-p", type=float, default=0.95)
        parser.add_argument("--top-k", type=int, default=0)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
        parser.add_argument("--model", default=None, help="GGUF path, HF folder or hub id (default: MINIVLLM_MODEL)")
        parser.add_argument("--device", default=None, help="auto, cpu or cuda (default: MINIVLLM_DEVICE)")
        parser.add_argument("--dtype", default=None, help="auto, float32, bfloat16, float16 (default: MINIVLLM_DTYPE)")

    def handle(self, *args, **opts):
        config, params = self.config_and_params(opts)
        return self.complete_prompt(config, params, opts)

    def config_and_params(self, opts: dict) -> tuple[EngineConfig, SamplingParams]:
        try:
            params = SamplingParams(
                max_tokens=opts["max_tokens"],
                temperature=opts["temperature"],
                top_p=opts["top_p"],
                top_k=opts["top_k"],
                seed=opts["seed"],
            )
            overrides = {k: opts[k] for k in ("model", "device", "dtype") if opts[k] is not None}
            return dataclasses.replace(EngineConfig.from_env(), **overrides), params
        except (SamplingParamsError, ValueError) as exc:
            raise CommandError(str(exc)) from None

    def complete_prompt(self, config: EngineConfig, params: SamplingParams, opts: dict) -> None:
        from inference.engine.engine import LLMEngine

        began = time.perf_counter()
        engine = LLMEngine(config)
        load_s = time.perf_counter() - began
        out = self.stdout
        out.write(f"model:  {engine.model_name}")
        out.write(f"device: {engine.device}")
        out.write(f"dtype:  {engine.dtype}")
        out.write(f"loaded in {load_s:.1f}s")

        prompt = opts["prompt"]
        if opts["chat"]:
            prompt = engine.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        out.write(f"prompt: {opts['prompt']!r}")
        out.write("output: ", ending="")
        out.flush()

        try:
            engine.add_request("generate-0", engine.tokenize(prompt), params)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        started = time.perf_counter()
        first_token_at = None
        completion_tokens, finish_reason = 0, None
        while engine.has_work():
            for result in engine.step():
                if result.token_ids and first_token_at is None:
                    first_token_at = time.perf_counter()
                out.write(result.text, ending="")
                out.flush()
                completion_tokens = result.completion_tokens
                if result.finished:
                    finish_reason = result.finish_reason
        elapsed = time.perf_counter() - started
        out.write("")
        out.write(f"tokens: {completion_tokens} (finish_reason={finish_reason})")
        ttft = f"{(first_token_at - started) * 1000:.0f} ms" if first_token_at else "-"
        out.write(f"time:   {elapsed:.2f}s, first token after {ttft}")
        out.write(f"speed:  {completion_tokens / elapsed if elapsed > 0 else 0.0:.1f} tokens/s")
