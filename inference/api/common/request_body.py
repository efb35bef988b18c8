"""A request's body: JSON, UTF-8, an object, no unpaired surrogates, within the size limit;
anything else is a 413 / 415 / 400 that says what is wrong."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig

from .errors import ApiError, bad_request


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(request, *, any_content_type: bool = False) -> dict:
    """The body as a JSON object, or 413/415/400 with a message saying what is wrong.
    `any_content_type`: read as JSON whatever the header says (Ollama's API does: its documented
    curl calls send form encoding's)."""
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type and not any_content_type and content_type != "application/json" and not content_type.endswith("+json"):
        raise ApiError(
            415,
            f"Content-Type must be application/json, got {content_type!r} (curl: add -H 'Content-Type: application/json')",
            code="unsupported_media_type",
        )
    try:
        raw = request.body
    except RequestDataTooBig:
        raw = None
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if raw is None or (limit is not None and len(raw) > limit):  # a chunked body has no Content-Length
        raise ApiError(413, f"request body is too large (limit {limit} bytes)", code="request_too_large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"request body is not valid UTF-8 (byte {exc.start})", code="invalid_body") from None
    if not text.strip():
        raise bad_request("request body is empty; send a JSON object", code="invalid_body")
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request(f"request body must be a JSON object, got {type(body).__name__}", code="invalid_body")
    _check_unicode(body, "")
    return body


def _check_unicode(value: Any, path: str) -> None:
    """JSON may escape half a surrogate pair ("\\ud800"); such a string is no Unicode text: it cannot
    be encoded, tokenized or stored, so it is refused here, naming the field, on every endpoint."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise bad_request(
                f"{path or 'a key'} holds an unpaired surrogate (U+{ord(value[exc.start]):04X}), which is not valid Unicode",
                param=path or None,
                code="invalid_unicode",
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode(key, path)
            _check_unicode(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_unicode(item, f"{path}[{index}]")
