"""`manage.py runengine`: the scale-out engine worker (MINIVLLM_ENGINE=remote).

It loads the model, takes requests from the shared channel on the channel layer (Redis) and
serves every web process until SIGTERM (see inference/serving/remote/worker.py). With --prompt it
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


def _exit_if_stuck(grace_s: float) -> None:
    """A daemon timer: if the process is still here `grace_s` after the stop signal, every
    thread's stack goes to stderr and the process exits 0 (the stop itself was asked for), so an
    orchestrator's stop never hangs on a stuck shutdown."""

    def expire() -> None:
        sys.stderr.write(f"runengine: shutdown still running after {grace_s:.0f} s; thread stacks follow, then exit\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(0)

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
        """The long-running worker: exits 0 after SIGTERM/SIGINT, 1 if the engine died."""
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        from inference.engine.engine_thread import EngineThread
        from inference.serving.remote.worker import EngineWorker

        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            self.stderr.write("warning: no REDIS_URL: the in-memory channel layer reaches no web process")
        engine_thread = EngineThread(config, max_queue=settings.MINIVLLM_MAX_QUEUE).start()
        worker = EngineWorker(
            engine_thread,
            layer=layer,
            engine_id=settings.MINIVLLM_ENGINE_ID or None,
            heartbeat_file=settings.MINIVLLM_ENGINE_HEARTBEAT_FILE or None,
        )

        async def main() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()

            def on_signal() -> None:
                stop.set()
                _exit_if_stuck(SHUTDOWN_GRACE_S)

            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, on_signal)
            return await worker.serve(stop)

        self.stdout.write(f"engine {worker.engine_id}: loading {config.model or 'embedded SmolLM2-135M-Instruct'}")
        code = asyncio.run(main())
        if code:
            raise CommandError(f"engine {worker.engine_id} stopped: {engine_thread.error}", returncode=code)
