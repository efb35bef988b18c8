"""API keys: who may call the API, and the guards the views use.

Keys come from MINIVLLM_API_KEYS (comma-separated) and from the admin (`ApiKey`, stored as a
SHA-256 hash only). While no key exists anywhere the server is open, as before; once one does
(a revoked admin key counts: revoking every key must not open the server), `/generate` and
`/v1/*` need `Authorization: Bearer <key>`, and `/stats`, `/metrics`, `/api/requests/`,
`/ws/stats` and the dashboard need a key or a staff login. `/health` is always open.

Keys are compared as SHA-256 digests with `hmac.compare_digest`, against every env key (no early
exit), so neither a key's content nor its length shows in the response time.
"""

from __future__ import annotations

import functools
import hmac
from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.utils import timezone

from ...keys import hash_key
from .errors import ApiError

_LAST_USED_RESOLUTION = timedelta(seconds=30)  # last_used_at is written at most this often per key


@dataclass(frozen=True)
class Caller:
    """An authenticated key: its label goes to the history row, its id links the ApiKey."""

    label: str
    key_id: int | None = None
    fingerprint: str = ""  # an environment key's digest prefix: who owns what it made, whatever its position


ANONYMOUS = None  # the caller when the server runs without keys


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _env_caller(digest: str) -> Caller | None:
    found = None
    for index, key in enumerate(settings.MINIVLLM_API_KEYS, start=1):
        if hmac.compare_digest(digest, hash_key(key)) and found is None:
            found = Caller(label=f"env:{index}", fingerprint=digest[:32])
    return found


def _key_model():
    from ...models import ApiKey

    return ApiKey


# ---- sync (DRF and plain sync views) -------------------------------------------------------


def keys_configured() -> bool:
    return bool(settings.MINIVLLM_API_KEYS) or _key_model().objects.exists()


def authenticate(token: str | None) -> Caller | None:
    if not token:
        return None
    digest = hash_key(token)
    caller = _env_caller(digest)
    if caller is not None:
        return caller
    key = _key_model().objects.filter(key_hash=digest, revoked=False).first()
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        return None
    _touch(key)
    return Caller(label=key.label, key_id=key.pk)


def _touch(key) -> None:
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > _LAST_USED_RESOLUTION:
        type(key).objects.filter(pk=key.pk).update(last_used_at=now)


# ---- async (the streaming views and the WebSocket consumer) ------------------------------------


# One implementation: the async callers run the sync one on Django's thread for ORM work.
akeys_configured = sync_to_async(keys_configured)
aauthenticate = sync_to_async(authenticate)


def unauthorized(message: str = "a valid API key is required: send `Authorization: Bearer <key>`") -> ApiError:
    return ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def request_token(request) -> str | None:
    """The key a request sends: `Authorization: Bearer <key>`, or `x-api-key: <key>` as Anthropic's clients send it."""
    return bearer_token(request.headers.get("Authorization")) or (request.headers.get("X-Api-Key") or "").strip() or None


async def require_api_key(request) -> Caller | None:
    """For /generate and /v1/*: the caller, ANONYMOUS while no key exists, else 401."""
    token = request_token(request)
    if not await akeys_configured():
        return ANONYMOUS
    caller = await aauthenticate(token)
    if caller is None:
        raise unauthorized("invalid API key" if token else "missing API key: send `Authorization: Bearer <key>`")
    return caller


# ---- key or staff: /stats, /metrics, /api/requests/, the dashboard, /ws/stats -----------------------


def _denied(request, login_redirect: bool):
    if login_redirect and not request.headers.get("Authorization"):
        return redirect_to_login(request.get_full_path())
    return unauthorized("a valid API key or a staff login is required").response()


def require_key_or_staff(view=None, *, login_redirect: bool = False):
    """Guards a sync or async Django view (wrap `SomeAPIView.as_view()` for DRF). With
    `login_redirect`, a browser without credentials is sent to the admin login instead of a 401."""

    def decorate(view):
        if iscoroutinefunction(view):

            async def async_wrapper(request, *args, **kwargs):
                if await akeys_configured():
                    user = await request.auser()
                    if not user.is_staff and await aauthenticate(bearer_token(request.headers.get("Authorization"))) is None:
                        return _denied(request, login_redirect)
                return await view(request, *args, **kwargs)

            wrapper = markcoroutinefunction(functools.wraps(view)(async_wrapper))
        else:

            def sync_wrapper(request, *args, **kwargs):
                if keys_configured():
                    if not request.user.is_staff and authenticate(bearer_token(request.headers.get("Authorization"))) is None:
                        return _denied(request, login_redirect)
                return view(request, *args, **kwargs)

            wrapper = functools.wraps(view)(sync_wrapper)
        return wrapper

    return decorate(view) if view is not None else decorate


async def websocket_allowed(scope) -> bool:
    """For /ws/stats: a staff session (AuthMiddlewareStack puts it in scope["user"]) or a key in
    the Authorization header; anyone while no key exists."""
    if not await akeys_configured():
        return True
    user = scope.get("user")
    if user is not None and getattr(user, "is_staff", False):
        return True
    headers = dict(scope.get("headers") or [])
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    return await aauthenticate(bearer_token(authorization)) is not None
