"""`manage.py runengine`: the scale-out engine worker (MINIVLLM_ENGINE=remote).

It loads its models (MINIVLLM_MODEL, and each model of MINIVLLM_MODELS_DIR), takes each one's
requests from that model's channel on the channel layer (Redis) and serves every web process until SIGTERM (see inference/serving/remote/worker.py). With --prompt it
runs `manage.py generate` instead (one completion and its speed), as the README has long shown.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading

from django.conf import settings
from django.core.management.base import CommandError

from inference.engine.config import EngineConfig

from .generate import Command as GenerateCommand

# A graceful stop waits up to 10 s for the engine thread and 10 s for the forwarders (worker.py);
# past this, something is stuck (a Redis call, an executor job): say where, and exit anyway.
SHUTDOWN_GRACE_S = 40.0
STUCK_EXIT_CODE = 70  # EX_SOFTWARE: the stop was asked for, but did not finish by itself


def _exit_if_stuck(grace_s: float) -> None:
    """A daemon timer: if the process is still here `grace_s` after the stop signal, every
    thread's stack goes to stderr and the process exits STUCK_EXIT_CODE, so an orchestrator's stop
    never hangs on a stuck shutdown, and the stall is not mistaken for a clean stop (exit 0) by
    a supervisor or a test."""

    def expire() -> None:
        sys.stderr.write(
            f"runengine: shutdown still running after {grace_s:.0f} s; thread stacks follow, "
            f"then exit {STUCK_EXIT_CODE} (a stuck shutdown, not a clean one)\n"
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(STUCK_EXIT_CODE)

    if not any(t.name == "runengine-shutdown-watchdog" for t in threading.enumerate()):
        timer = threading.Timer(grace_s, expire)
        timer.name, timer.daemon = "runengine-shutdown-watchdog", True
        timer.start()


class Command(GenerateCommand):
    help = "Run an engine worker for the web processes (scale-out); with --prompt, `generate` one completion."
    prompt_required = False

    def handle(self, *args, **opts):
        config, params = self.config_and_params(opts)
        if opts["prompt"] is None:
            return self.serve(config)
        return self.complete_prompt(config, params, opts)

    def serve(self, config: EngineConfig) -> None:
        """The long-running worker: one engine per model it serves (MINIVLLM_MODEL, and with
        MINIVLLM_MODELS_DIR each model of the folder, as the web processes' catalogue lists them),
        each taking its model's requests. Exits 0 after SIGTERM/SIGINT, 1 if an engine died."""
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        from inference.engine.engine_thread import EngineThread
        from inference.serving.models.catalogue import served_specs
        from inference.serving.remote.worker import EngineWorker

        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            self.stderr.write("warning: no REDIS_URL: the in-memory channel layer reaches no web process")
        specs = served_specs(config, all_loaded=True)  # a worker holds every model it serves
        base_id = settings.MINIVLLM_ENGINE_ID or None
        workers = []
        for position, spec in enumerate(specs):
            engine_thread = EngineThread(spec.config, max_queue=settings.MINIVLLM_MAX_QUEUE)
            engine_id = base_id if len(specs) == 1 else f"{base_id or EngineWorker.default_id()}-{spec.name}"
            worker = EngineWorker(
                engine_thread,
                layer=layer,
                engine_id=engine_id,
                heartbeat_file=settings.MINIVLLM_ENGINE_HEARTBEAT_FILE or None,
                model_name=spec.name,
                purge=position == 0,
            )
            workers.append(worker)

        async def main() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()

            def on_signal() -> None:
                stop.set()
                _exit_if_stuck(SHUTDOWN_GRACE_S)

            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, on_signal)
            serving = []
            for worker in workers:  # one load at a time: its imports and its memory peak are not shared
                self.stdout.write(
                    f"engine {worker.engine_id}: loading {worker.model_name} ({worker.engine_thread.config.model or 'embedded SmolLM2-135M-Instruct'})"
                )
                worker.engine_thread.start()
                serving.append(asyncio.create_task(worker.serve(stop)))  # its heartbeat says "loading" meanwhile
                await asyncio.to_thread(worker.engine_thread.wait_ready)
                if stop.is_set():
                    break
            codes = []
            for finished in asyncio.as_completed(serving):
                code = await finished
                codes.append(code)
                if code:  # an engine died: the process goes, so its supervisor starts it again
                    stop.set()
            return max(codes, default=0)

        code = asyncio.run(main())
        if code:
            errors = "; ".join(f"{w.model_name}: {w.engine_thread.error}" for w in workers if w.engine_thread.error)
            raise CommandError(f"engine {base_id or workers[0].engine_id} stopped: {errors}", returncode=code)
