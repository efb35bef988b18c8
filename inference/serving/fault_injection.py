"""Test-only: POST /_test/fault injects an engine fault into this live process.

Routed only when MINIVLLM_FAULT_INJECTION=1 (the reliability tests start Daphne with it); the
hooks are the engine's own (`LLMEngine.step_fault_hook`, `EngineThread.loop_fault_hook`).
Body: {"kind": "step"} fails the next model step (only its requests), {"kind": "loop"} kills the
engine loop once (it restarts); "times" repeats the fault (default 1); "hold_restart": true keeps
the loop in "restarting" until {"kind": "release"} arrives, so a client can see /health answer
503 for as long as it needs (it waits on that condition, not on a window of time).
"""

from __future__ import annotations

import json
import threading

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


_released = threading.Event()


def _held_restart(engine) -> None:
    """The next restart (engine.fresh_copy) first waits for {"kind": "release"}."""
    original = engine.fresh_copy
    _released.clear()

    def fresh_copy():
        _released.wait()
        return original()

    engine.fresh_copy = fresh_copy


@csrf_exempt
@require_POST
def inject_fault(request):
    try:
        body = json.loads(request.body or b"{}")
        kind, times, hold = body.get("kind"), int(body.get("times", 1)), bool(body.get("hold_restart", False))
    except (ValueError, TypeError, AttributeError):
        return JsonResponse({"error": "body must be JSON {kind, times, hold_restart}"}, status=400)
    if kind == "release":
        _released.set()
        return JsonResponse({"released": True})
    engine_client = runtime.get_engine_client()
    if engine_client is None or not engine_client.ready:
        return JsonResponse({"error": "engine not ready"}, status=503)
    if getattr(engine_client, "engine", None) is None:
        return JsonResponse({"error": "fault injection needs the in-process engine (MINIVLLM_ENGINE=local)"}, status=400)
    if kind == "step":
        engine_client.engine.step_fault_hook = _raise_times(times, "injected step failure")
    elif kind == "loop":
        if hold:
            _held_restart(engine_client.engine)
        engine_client.loop_fault_hook = _raise_times(times, "injected loop failure")
    else:
        return JsonResponse({"error": "kind must be 'step', 'loop' or 'release'"}, status=400)
    return JsonResponse({"injected": kind, "times": times})
