"""GET /: the page, its context and the JS config it embeds; its static files, with no build step."""

import json
import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.urls import resolve

from dashboard.page_config import REQUEST_ID_PLACEHOLDER
from inference.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db  # the page checks whether any API key exists

STATIC_JS = Path(__file__).resolve().parents[2] / "static" / "js"


def embedded_json(html: str, element_id: str) -> dict:
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, f"no #{element_id} in the page"
    return json.loads(match.group(1))


def test_page_renders_without_an_engine(client, no_engine):
    resp = client.get("/")
    assert resp.status_code == 200
    assert [t.name for t in resp.templates][:2] == ["dashboard/index.html", "dashboard/_chat.html"]
    html = resp.content.decode()
    stats = embedded_json(html, "initial-stats")
    assert stats == resp.context["stats"] and stats["engine_state"] == "not_started"
    assert stats["slots"] == [] and '<li class="slot' not in html
    # the banner is there for the JS to show while /health is not 200
    assert re.search(r'id="offline-banner"[^>]*hidden', html)
    assert embedded_json(html, "dashboard-config")["urls"]["health"] == "/health"


def test_page_with_an_engine_shows_model_and_slots(client, engine_client):
    html = client.get("/").content.decode()
    stats = embedded_json(html, "initial-stats")
    assert stats["model"] == engine_client.engine.model_name and stats["device"] == "cpu"
    assert f'<dd id="model-name">{engine_client.engine.model_name}</dd>' in html
    assert len(re.findall(r'<li class="slot', html)) == stats["num_slots"] == engine_client.config.max_num_seqs


def test_config_points_at_live_routes(client, no_engine):
    config = client.get("/").context["config"]
    urls = config["urls"]
    assert urls["health"] == "/health" and urls["stats"] == "/stats" and urls["chat"] == "/v1/chat/completions"
    assert urls["requests"] == "/api/requests/" and urls["stats_socket"] == "/ws/stats"
    assert client.get(urls["health"]).status_code == 503  # no engine: the page's JS shows "engine offline"
    assert resolve(urls["stats"]).url_name == "stats" and resolve(urls["requests"]).url_name == "request-list"
    assert resolve(urls["chat"]).url_name == "chat-completions"
    assert [str(p.pattern) for p in websocket_urlpatterns] == [urls["stats_socket"].lstrip("/")]
    admin = urls["admin_request"].replace(REQUEST_ID_PLACEHOLDER, "chatcmpl-abc")
    assert resolve(admin).url_name == "inference_generationrequest_change"
    assert resolve(urls["admin_requests"]).url_name == "inference_generationrequest_changelist"
    assert urls["models"] == "/v1/models" and urls["admin"] == "/admin/"
    assert config["recent_requests"] == 20 and config["sparkline_window_s"] == 60
    assert 0 < config["reconnect_min_ms"] < config["reconnect_max_ms"] and config["health_poll_ms"] > 0


@pytest.mark.django_db
def test_admin_link_target_exists(client, no_engine):
    """Recent-request rows link to the admin's change page (a login redirect when signed out)."""
    urls = client.get("/").context["config"]["urls"]
    resp = client.get(urls["admin_request"].replace(REQUEST_ID_PLACEHOLDER, "cmpl-1"))
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]


def test_page_assets_are_local_static_files(client, no_engine):
    html = client.get("/").content.decode()
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert {"/static/js/main.js", "/static/css/dashboard.css"} <= set(assets)
    for asset in assets:
        assert finders.find(asset.removeprefix("/static/")), asset
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)  # no CDN, no external library


def test_js_modules_import_only_files_that_exist():
    """No bundler: every ES-module import is a relative path to a file under static/js."""
    modules = sorted(STATIC_JS.rglob("*.js"))
    assert modules
    for module in modules:
        for target in re.findall(r'^import .* from "([^"]+)";$', module.read_text(), re.M):
            assert target.startswith("."), f"{module.name} imports {target}"
            assert (module.parent / target).resolve().is_file(), f"{module.name} imports missing {target}"


KEY = "dashboard-test-key-0123456789abcdef"


def test_with_api_keys_the_page_needs_a_key_or_a_staff_login(client, no_engine, settings, django_user_model):
    settings.MINIVLLM_API_KEYS = [KEY]
    anonymous = client.get("/")
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    assert client.get("/", HTTP_AUTHORIZATION="Bearer wrong-key").status_code == 401
    with_key = client.get("/", HTTP_AUTHORIZATION=f"Bearer {KEY}")
    assert with_key.status_code == 200 and embedded_json(with_key.content.decode(), "dashboard-config")["api_keys_required"]
    staff = django_user_model.objects.create_user("ops", password="pw-for-tests", is_staff=True)
    client.force_login(staff)
    page = client.get("/").content.decode()
    assert 'id="chat-api-key"' in page  # the chat must send a key to /v1/chat/completions


def test_without_api_keys_the_page_is_open_and_asks_for_no_key(client, no_engine):
    page = client.get("/")
    assert page.status_code == 200 and 'id="chat-api-key"' not in page.content.decode()


def test_the_chat_form_starts_from_the_checkpoints_sampling_defaults(client, tiny_llama_with_sampling_defaults_dir):
    from inference.serving import runtime
    from tests.support.engine_fixtures import start_engine_thread, tiny_engine_config

    engine_thread = start_engine_thread(tiny_engine_config(tiny_llama_with_sampling_defaults_dir))
    previous = runtime.install(engine_thread)
    try:
        config = embedded_json(client.get("/").content.decode(), "dashboard-config")
    finally:
        runtime.install(previous)
        engine_thread.shutdown()
    assert config["chat_defaults"]["temperature"] == 0.3 and config["chat_defaults"]["top_p"] == 0.8
