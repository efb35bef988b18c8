"""Auth on a live server: no key / wrong key / revoked key / right key on every protected endpoint."""

from __future__ import annotations

import re
import socket

import httpx
import pytest

from tests.security.conftest import OTHER_ENV_KEY, STAFF, bearer
from tests.support.sse import assert_error_shape

pytestmark = [pytest.mark.live, pytest.mark.real_model]

# (method, path, body): the API needs a key; a staff login is not enough there
API = [
    ("POST", "/generate", {"prompt": "Hi", "max_new_tokens": 2}),
    ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    ("GET", "/v1/models", None),
]
# a key or a staff login
MONITORING = [("GET", "/stats", None), ("GET", "/metrics", None), ("GET", "/api/requests/", None)]


def call(server, method, path, body, headers=None, cookies=None) -> httpx.Response:
    return httpx.request(method, server.url + path, json=body, headers=headers or {}, cookies=cookies, timeout=60)


def ws_handshake(server, headers: dict | None = None) -> int:
    """The HTTP status of a WebSocket upgrade to /ws/stats: 101 accepted, 403 refused."""
    lines = [
        "GET /ws/stats HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        f"Origin: {server.url}",
        *[f"{name}: {value}" for name, value in (headers or {}).items()],
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


def refused(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.headers.get("WWW-Authenticate") == "Bearer"
    assert assert_error_shape(resp)["code"] == "invalid_api_key"


def credentials(keys):
    return {"none": {}, "wrong": bearer(keys.wrong), "revoked": bearer(keys.revoked), "not bearer": {"Authorization": keys.env}}


@pytest.mark.parametrize("method,path,body", API + MONITORING)
def test_protected_endpoints_refuse_bad_credentials(secured, method, path, body):
    for name, headers in credentials(secured.keys).items():
        resp = call(secured, method, path, body, headers)
        assert resp.status_code == 401, (name, resp.status_code)
        refused(resp)


@pytest.mark.parametrize("method,path,body", API + MONITORING)
def test_protected_endpoints_accept_env_and_admin_keys(secured, method, path, body):
    for key in (secured.keys.env, OTHER_ENV_KEY, secured.keys.db):
        resp = call(secured, method, path, body, bearer(key))
        assert resp.status_code == 200, (path, resp.text)


def test_health_stays_open(secured):
    assert httpx.get(f"{secured.url}/health", timeout=10).status_code == 200


def test_ws_stats_needs_key_or_staff(secured):
    keys = secured.keys
    for headers in credentials(keys).values():
        assert ws_handshake(secured, headers) == 403
    assert ws_handshake(secured, bearer(keys.env)) == 101
    assert ws_handshake(secured, bearer(keys.db)) == 101


def staff_session(server) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=30)
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    resp = client.post(
        "/admin/login/", data={"csrfmiddlewaretoken": token, "username": STAFF[0], "password": STAFF[1], "next": "/admin/"}
    )
    assert resp.status_code == 302 and "sessionid" in client.cookies, resp.text
    return client


def test_staff_login_opens_monitoring_but_not_the_api(secured):
    client = staff_session(secured)
    try:
        for method, path, body in MONITORING:
            assert client.request(method, path, json=body).status_code == 200, path
        for method, path, body in API:
            refused(client.request(method, path, json=body))
        cookie = f"sessionid={client.cookies['sessionid']}"
        assert ws_handshake(secured, {"Cookie": cookie}) == 101
    finally:
        client.close()


def test_history_rows_record_the_key(secured):
    keys = secured.keys
    ids = {}
    for label, key in (("env:1", keys.env), ("db", keys.db)):
        resp = call(secured, "POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2}, bearer(key))
        assert resp.status_code == 200
        ids[label] = resp.json()["id"]
    env_row = secured.wait_row(ids["env:1"])
    assert env_row["api_key_label"] == "env:1" and env_row["api_key_id"] is None
    db_row = secured.wait_row(ids["db"])
    [key_row] = secured.rows_of("inference_apikey", "name = 'good'")
    assert db_row["api_key_id"] == key_row["id"] and db_row["api_key_label"].startswith(keys.db[:12])
    assert key_row["last_used_at"] is not None
    assert key_row["key_hash"] != keys.db and keys.db not in str(key_row)  # only the hash is stored
