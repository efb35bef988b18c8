"""What the dashboard's JS needs to know: where to connect and how often to poll.

One dict, rendered into the page with `json_script`, so the JS never hard-codes a URL and the
view tests can check every address the page will use.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from inference.api.common.auth import keys_configured
from inference.serving import runtime

# The WebSocket route lives in inference/routing.py (Channels routes cannot be reversed).
STATS_SOCKET_PATH = "/ws/stats"
# A placeholder the JS swaps for a request id to link a history row to its admin page.
REQUEST_ID_PLACEHOLDER = "__request_id__"

RECENT_REQUESTS = 20
SPARKLINE_WINDOW_S = 60
HEALTH_POLL_MS = 3000
REQUESTS_POLL_MS = 3000
RECONNECT_MIN_MS = 500
RECONNECT_MAX_MS = 10_000
CHAT_DEFAULTS = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 256}


def page_config() -> dict:
    return {
        "api_keys_required": keys_configured(),
        "urls": {
            "stats_socket": STATS_SOCKET_PATH,
            "stats": reverse("stats"),
            "health": reverse("health"),
            "requests": reverse("request-list"),
            "chat": reverse("chat-completions"),
            "models": reverse("models"),
            "load_model": reverse("router-load"),
            "unload_model": reverse("router-unload"),
            "admin": reverse("admin:index"),
            "admin_requests": reverse("admin:inference_generationrequest_changelist"),
            "admin_request": reverse("admin:inference_generationrequest_change", args=[REQUEST_ID_PLACEHOLDER]),
        },
        "request_id_placeholder": REQUEST_ID_PLACEHOLDER,
        "recent_requests": RECENT_REQUESTS,
        "sparkline_window_s": SPARKLINE_WINDOW_S,
        "stats_interval_ms": int(settings.MINIVLLM_STATS_INTERVAL * 1000),
        "health_poll_ms": HEALTH_POLL_MS,
        "requests_poll_ms": REQUESTS_POLL_MS,
        "reconnect_min_ms": RECONNECT_MIN_MS,
        "reconnect_max_ms": RECONNECT_MAX_MS,
        "chat_defaults": chat_defaults(),
    }


def chat_defaults() -> dict:
    """The chat form's starting values: the served checkpoint's own temperature and top_p where its
    generation_config sets them (what a request leaving them out gets), else ours."""
    info = runtime.current_model_info()
    model = info.sampling_defaults if info is not None else {}
    return {**CHAT_DEFAULTS, **{name: model[name] for name in ("temperature", "top_p") if name in model}}
