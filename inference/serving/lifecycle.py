"""Serving-process lifecycle: start the engine once, repair history, purge expired stored
responses hourly (local mode), stop cleanly.

Daphne has no ASGI lifespan, so asgi.py calls `autostart()` at import. Shutdown, under Daphne
(Twisted): once the reactor runs we take over SIGTERM/SIGINT, stop the engine (in-flight streams
get a final "abort" output and finish their responses and rows), then stop the reactor; before
that, Daphne would cancel the request coroutines mid-response. A "before shutdown" trigger
covers other ways the reactor stops; the lifespan app serves lifespan-speaking servers
(uvicorn); atexit is the last resort. In remote engine mode the same steps stop the
RemoteEngine (in-flight streams end with "abort" and their engines are told to abort).

Once a signal's drain has ended (every row closed, or the shutdown timeout logged), the process
leaves with os._exit(0) instead of finalizing the interpreter: CPython 3.11 up to 3.11.7 (what
these machines run) can segfault while its final garbage collection closes a coroutine left
waiting in an asyncio.Queue (python/cpython#113566, fixed in 3.11.8), which made a clean SIGTERM
exit -11 now and then. The rows written are committed and the logs flushed first; atexit
handlers registered before ours (none of ours) are skipped.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import sys
import threading
import time

from django.conf import settings

from .. import services
from . import jobs, runtime

log = logging.getLogger("inference.serving.lifecycle")
_hooks_installed = False
_drain: asyncio.Future | None = None
_signalled = False
_drained_after_signal = False


def autostart() -> None:
    if not settings.MINIVLLM_AUTOSTART:
        log.info("engine autostart is off (MINIVLLM_AUTOSTART=0)")
        return
    if settings.MINIVLLM_ENGINE == "remote":
        # other web workers may be streaming right now: their "running" rows are not stale
        log.info("remote engine mode: start-up repair of interrupted rows is skipped")
    else:
        services.requests_fail_interrupted()
        _purge_stored_responses_hourly()  # remote mode: the runengine workers purge
    runtime.start()
    install_shutdown_hooks()


def _purge_stored_responses_hourly() -> None:
    """Expired stored responses deleted now and every hour, in a daemon thread of their own: at
    autostart no event loop runs yet, and the purge is a blocking database call anyway."""
    from .. import stored_responses

    def purge_forever() -> None:
        while True:
            stored_responses.purge_logged()
            time.sleep(stored_responses.PURGE_INTERVAL_S)

    threading.Thread(target=purge_forever, name="stored-responses-purge", daemon=True).start()


def install_shutdown_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_exit_without_finalizing)  # registered first, so it runs last
    atexit.register(runtime.shutdown)
    if "twisted.internet.reactor" in sys.modules:
        from twisted.internet import defer, reactor

        def before_shutdown():
            return defer.Deferred.fromFuture(asyncio.ensure_future(stop_and_drain()))

        reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
        # runs after Twisted installed its own signal handlers, so ours replace them
        reactor.callWhenRunning(_take_over_signals, reactor)


def _take_over_signals(reactor) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # e.g. runserver's autoreloader runs the server in a thread: signals are not ours

    def on_signal(signum, frame):
        global _signalled
        if _signalled:  # a second signal: stop now
            reactor.callFromThread(reactor.stop)
            return
        _signalled = True
        log.info("received %s: finishing in-flight requests", signal.Signals(signum).name)
        reactor.callFromThread(lambda: asyncio.ensure_future(_drain_then_stop(reactor)))

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)


async def _drain_then_stop(reactor) -> None:
    global _drained_after_signal
    try:
        await stop_and_drain()
        _drained_after_signal = True
    finally:
        reactor.stop()


def _exit_without_finalizing() -> None:
    """The last atexit step after a signal's clean drain (the module docstring says why)."""
    if not _drained_after_signal:
        return
    try:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # a closed or broken pipe: nothing more can be written anyway
        pass
    os._exit(0)


def stop_and_drain() -> asyncio.Future:
    """Stops the engine (once), then waits for in-flight requests to record their end."""
    global _drain
    if _drain is None or _drain.get_loop() is not asyncio.get_running_loop():
        _drain = asyncio.ensure_future(_stop_and_drain())
    return _drain


async def _stop_and_drain() -> None:
    in_flight = len(jobs.live_jobs())
    log.info("shutting down: %d request(s) in flight", in_flight)
    await asyncio.get_running_loop().run_in_executor(None, runtime.shutdown)
    if not await jobs.wait_for_live_jobs(settings.MINIVLLM_SHUTDOWN_TIMEOUT):
        log.warning("some requests did not record their end before the shutdown timeout")
    log.info("engine stopped")


async def lifespan_app(scope, receive, send):
    """ASGI lifespan (uvicorn, hypercorn): the same start and stop as under Daphne."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await stop_and_drain()
            await send({"type": "lifespan.shutdown.complete"})
            return
