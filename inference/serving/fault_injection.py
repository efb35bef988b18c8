"""Test-only: POST /_test/fault injects an engine fault into this live process.

Routed only when MINIVLLM_FAULT_INJECTION=1 (the reliability tests start Daphne with it); the
hooks (engine/fault_hooks.py, every test-only failure point of the engine) are installed through
the engine client's contract (`EngineClient.inject_fault`).
Body: {"kind": "step"} fails the next model step (only its requests), {"kind": "loop"} kills the
engine loop once (it restarts); "times" repeats the fault (default 1); "hold_restart": true keeps
the loop in "restarting" until {"kind": "release"} arrives, so a client can see /health answer
503 for as long as it needs (it waits on that condition, not on a window of time). "model" names
which model's engine, where the server holds several (default: the default model's).
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


_released = threading.Event()  # the next restart waits for {"kind": "release"}


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
    if body.get("model"):  # a model of several: the one named
        models = runtime.get_models()
        slots = [slot for slot in (models.slots.values() if models else ()) if slot.answers_to(body["model"])]
        engine_client = slots[0].client if slots else None
    if engine_client is None or not getattr(engine_client, "ready", False):
        return JsonResponse({"error": "engine not ready"}, status=503)
    if kind not in ("step", "loop"):
        return JsonResponse({"error": "kind must be 'step', 'loop' or 'release'"}, status=400)
    try:
        if kind == "loop" and hold:
            _released.clear()
            engine_client.inject_fault("restart", _released.wait)
        engine_client.inject_fault(kind, _raise_times(times, f"injected {kind} failure"))
    except NotImplementedError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"injected": kind, "times": times})
