"""The ASGI entry point: routes, no engine autostart under tests, lifespan, and the landing page."""

import pytest
from asgiref.testing import ApplicationCommunicator

from inference.serving import lifecycle, runtime
from minivllm_site import asgi


def test_protocols_routed():
    assert set(asgi.application.application_mapping) == {"http", "websocket", "lifespan"}


def test_autostart_is_off_under_pytest(settings, no_engine):
    assert settings.MINIVLLM_AUTOSTART is False
    lifecycle.autostart()
    assert runtime.get_engine_client() is None


async def test_lifespan_startup_and_shutdown(no_engine):
    comm = ApplicationCommunicator(asgi.application, {"type": "lifespan", "asgi": {"version": "3.0"}})
    await comm.send_input({"type": "lifespan.startup"})
    assert (await comm.receive_output(timeout=10))["type"] == "lifespan.startup.complete"
    await comm.send_input({"type": "lifespan.shutdown"})
    assert (await comm.receive_output(timeout=10))["type"] == "lifespan.shutdown.complete"


@pytest.mark.django_db
def test_landing_page_links_stats_health_admin(client):
    resp = client.get("/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "mini-vLLM" in html
    for link in ('href="/stats"', 'href="/health"', 'href="/admin/"'):
        assert link in html
