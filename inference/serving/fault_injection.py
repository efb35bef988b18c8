"""Test-only: POST /_test/fault injects an engine fault into this live process.

Routed only when MINIVLLM_FAULT_INJECTION=1 (the reliability tests start Daphne with it); the
hooks are the engine's own (`LLMEngine.step_fault_hook`, `EngineThread.loop_fault_hook`).
Body: {"kind": "step"} fails the next model step (only its requests), {"kind": "loop"} kills the
engine loop once (it restarts); "times" repeats the fault (default 1); "restart_delay_s" holds
the loop in "restarting" that long, so a client can see /health answer 503 meanwhile.
"""

from __future__ import annotations

import json
import threading
import time

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from . import runtime


def _raise_times(times: int, message: str):
    left = [times]
    lock = threading.Lock()

    def hook():
        with lock:
            if left[0] <= 0:
                return
            left[0] -= 1
        raise RuntimeError(message)

    return hook


def _slow_restart(engine, delay: float) -> None:
    """The next restart (engine.fresh_copy) first waits `delay` seconds."""
    original = engine.fresh_copy

    def fresh_copy():
        time.sleep(delay)
        return original()

    engine.fresh_copy = fresh_copy


@csrf_exempt
@require_POST
def inject_fault(request):
    try:
        body = json.loads(request.body or b"{}")
        kind, times = body.get("kind"), int(body.get("times", 1))
        delay = float(body.get("restart_delay_s", 0))
    except (ValueError, TypeError, AttributeError):
        return JsonResponse({"error": "body must be JSON {kind, times}"}, status=400)
    engine_client = runtime.get_engine_client()
    if engine_client is None or not engine_client.ready:
        return JsonResponse({"error": "engine not ready"}, status=503)
    if getattr(engine_client, "engine", None) is None:
        return JsonResponse({"error": "fault injection needs the in-process engine (MINIVLLM_ENGINE=local)"}, status=400)
    if kind == "step":
        engine_client.engine.step_fault_hook = _raise_times(times, "injected step failure")
    elif kind == "loop":
        if delay > 0:
            _slow_restart(engine_client.engine, delay)
        engine_client.loop_fault_hook = _raise_times(times, "injected loop failure")
    else:
        return JsonResponse({"error": "kind must be 'step' or 'loop'"}, status=400)
    return JsonResponse({"injected": kind, "times": times})
