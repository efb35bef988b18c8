"""Keys created in the admin: stored hashed with a visible prefix, shown once, revocable; and the
key-or-staff guard on the monitoring endpoints, in-process (no engine needed)."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages

from inference import keys
from inference.api.common import auth
from inference.models import ApiKey

pytestmark = pytest.mark.django_db


def create_key(admin_client, name="ci") -> tuple[ApiKey, str]:
    resp = admin_client.post("/admin/inference/apikey/add/", {"name": name})
    assert resp.status_code == 302
    [message] = [str(m) for m in get_messages(resp.wsgi_request) if "not be shown again" in str(m)]
    raw = re.search(r"(mvk-\S+)", message).group(1)
    return ApiKey.objects.get(name=name), raw


def test_created_key_is_shown_once_and_stored_hashed(admin_client):
    key, raw = create_key(admin_client)
    assert key.key_hash == keys.hash_key(raw) and raw not in (key.key_hash, key.prefix)
    assert raw.startswith(key.prefix) and len(key.prefix) == keys.PREFIX_CHARS
    assert raw in admin_client.get("/admin/inference/apikey/").content.decode()  # the one showing
    page = admin_client.get(f"/admin/inference/apikey/{key.pk}/change/").content.decode()
    listing = admin_client.get("/admin/inference/apikey/").content.decode()
    assert raw not in page and raw not in listing and key.prefix in listing


def test_authenticate_revoke_and_last_used(admin_client):
    key, raw = create_key(admin_client)
    assert key.last_used_at is None
    assert auth.authenticate(raw) == auth.Caller(label=key.label, key_id=key.pk)
    key.refresh_from_db()
    assert key.last_used_at is not None
    resp = admin_client.post("/admin/inference/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    assert resp.status_code == 302
    key.refresh_from_db()
    assert key.revoked and auth.authenticate(raw) is None
    assert auth.keys_configured()  # a revoked key does not reopen the server


def test_env_keys_compare_whole_keys(settings):
    settings.MINIVLLM_API_KEYS = ["alpha-key", "beta-key"]
    assert auth.authenticate("beta-key").label == "env:2"
    for wrong in ("beta", "beta-key ", "BETA-KEY", "", "alpha-keyx"):
        assert auth.authenticate(wrong) is None
    assert auth.bearer_token("Bearer  beta-key ") == "beta-key" and auth.bearer_token("Basic beta-key") is None


@pytest.mark.parametrize("path", ["/stats", "/metrics", "/api/requests/"])
def test_monitoring_open_without_keys_guarded_with_them(client, admin_client, settings, path):
    assert client.get(path).status_code == 200
    settings.MINIVLLM_API_KEYS = ["k-123"]
    resp = client.get(path)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"
    assert client.get(path, HTTP_AUTHORIZATION="Bearer k-123").status_code == 200
    assert admin_client.get(path).status_code == 200


def test_login_redirect_for_browsers(rf, settings):
    from django.contrib.auth.models import AnonymousUser

    settings.MINIVLLM_API_KEYS = ["k-123"]
    view = auth.require_key_or_staff(lambda request: "page", login_redirect=True)
    request = rf.get("/")
    request.user = AnonymousUser()
    resp = view(request)
    assert resp.status_code == 302 and resp["Location"].startswith("/admin/login/?next=/")
