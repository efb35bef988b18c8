"""The live dashboard: one server-rendered page; static JS keeps it live over /ws/stats."""

from django.shortcuts import render

from inference.api.common.auth import require_key_or_staff
from inference.serving.stats import stats_snapshot

from .page_config import page_config


@require_key_or_staff(login_redirect=True)
def index(request):
    """The first paint comes from the current stats snapshot, so the page is useful before the
    WebSocket connects (and still renders when no engine runs)."""
    return render(request, "dashboard/index.html", {"config": page_config(), "stats": stats_snapshot()})
