"""GET /api/requests/: recent requests, newest first, paginated."""

import pytest

from inference.models import GenerationRequest

pytestmark = pytest.mark.django_db


def test_lists_recent_requests_paginated(client, settings):
    for i in range(3):
        GenerationRequest.objects.create(id=f"gen-{i}", endpoint="generate", status="completed" if i else "failed")
    body = client.get("/api/requests/").json()
    assert body["count"] == 3 and [r["id"] for r in body["results"]] == ["gen-2", "gen-1", "gen-0"]
    assert {"status", "finish_reason", "latency", "time_to_first_token", "prompt_tokens"} <= set(body["results"][0])
    assert client.get("/api/requests/", {"status": "failed"}).json()["count"] == 1


def test_bad_page_is_json_404(client):
    resp = client.get("/api/requests/", {"page": 99})
    assert resp.status_code == 404 and set(resp.json()["error"]) == {"message", "type", "param", "code"}
