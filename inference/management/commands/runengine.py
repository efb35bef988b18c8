"""`manage.py runengine`: the scale-out engine worker (MINIVLLM_ENGINE=remote).

It loads the model, takes requests from the shared channel on the channel layer (Redis) and
serves every web process until SIGTERM (see inference/serving/remote/worker.py). With --prompt it
runs `manage.py generate` instead (one completion and its speed), as the README has long shown.
"""

from __future__ import annotations

import asyncio
import signal

from django.conf import settings
from django.core.management.base import CommandError

from inference.engine.config import EngineConfig

from .generate import Command as GenerateCommand


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
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            return await worker.serve(stop)

        self.stdout.write(f"engine {worker.engine_id}: loading {config.model or 'embedded SmolLM2-135M-Instruct'}")
        code = asyncio.run(main())
        if code:
            raise CommandError(f"engine {worker.engine_id} stopped: {engine_thread.error}", returncode=code)
