"""`manage.py runengine`: an engine worker process, or (with --prompt) a one-prompt smoke run.

Without --prompt it is the scale-out engine (MINIVLLM_ENGINE=remote): it loads the model, takes
requests from the shared channel on the channel layer (Redis) and serves every web process until
SIGTERM (see inference/serving/remote/worker.py). With --prompt it drives LLMEngine directly (add_request
+ step until done), the way the serving thread does, and prints the completion and its speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.engine.config import EngineConfig
from inference.engine.sampling_params import SamplingParams, SamplingParamsError


class Command(BaseCommand):
    help = "Run an engine worker for the web processes (scale-out), or with --prompt generate one completion and report tokens/s."

    def add_arguments(self, parser):
        parser.add_argument("--prompt", default=None, help="generate this one prompt and exit (default: serve as a worker)")
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
        try:
            params = SamplingParams(
                max_tokens=opts["max_tokens"],
                temperature=opts["temperature"],
                top_p=opts["top_p"],
                top_k=opts["top_k"],
                seed=opts["seed"],
            )
            overrides = {k: opts[k] for k in ("model", "device", "dtype") if opts[k] is not None}
            config = dataclasses.replace(EngineConfig.from_env(), **overrides)
        except (SamplingParamsError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        if opts["prompt"] is None:
            return self.serve(config)
        return self.smoke(config, params, opts)

    def serve(self, config: EngineConfig) -> None:
        """The long-running worker: exits 0 after SIGTERM/SIGINT, 1 if the engine died."""
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        from inference.engine.engine_thread import EngineThread
        from inference.serving.remote.worker import EngineWorker

        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            self.stderr.write("warning: no REDIS_URL: the in-memory channel layer reaches no web process")
        runner = EngineThread(config, max_queue=settings.MINIVLLM_MAX_QUEUE).start()
        worker = EngineWorker(
            runner,
            layer=layer,
            engine_id=settings.MINIVLLM_ENGINE_ID or None,
            heartbeat_file=settings.MINIVLLM_ENGINE_HEARTBEAT_FILE or None,
        )

        async def main() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            return await worker.serve(stop)

        self.stdout.write(f"engine {worker.engine_id}: loading {config.model or 'embedded SmolLM2-135M-Instruct'}")
        code = asyncio.run(main())
        if code:
            raise CommandError(f"engine {worker.engine_id} stopped: {runner.error}", returncode=code)

    def smoke(self, config: EngineConfig, params: SamplingParams, opts: dict) -> None:
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
            engine.add_request("runengine-0", prompt, params)
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
