"""WS /ws/stats: pushes the stats JSON to each client every second (settings.MINIVLLM_STATS_INTERVAL, fixed).

Each connection's push loop is a task on the server's event loop (no thread, no
async_to_sync); clients in the same tick share one snapshot (serving/stats.stats_snapshot).
Once API keys exist, a client needs a staff session or a key (auth.websocket_allowed).
"""

from __future__ import annotations

import asyncio
import logging

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from ..serving.stats import stats_snapshot
from .common import auth

log = logging.getLogger("inference.api.consumers")


class StatsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        if not await auth.websocket_allowed(self.scope):
            await self.close(code=4401)  # before accept: the handshake is refused (HTTP 403)
            return
        await self.accept()
        self._pusher = asyncio.create_task(self._push_forever())

    async def disconnect(self, code):
        pusher = getattr(self, "_pusher", None)
        if pusher is not None:
            pusher.cancel()

    async def receive_json(self, content, **kwargs):
        """Clients only listen; anything they send is ignored."""

    async def _push_forever(self):
        interval = settings.MINIVLLM_STATS_INTERVAL
        try:
            while True:
                await self.send_json(stats_snapshot())
                await asyncio.sleep(interval)
        except asyncio.CancelledError:
            raise
        except Exception:  # the socket went away between ticks
            log.debug("stats push stopped", exc_info=True)
