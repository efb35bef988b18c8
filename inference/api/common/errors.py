"""API errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

Every failure the API reports goes through `ApiError`, so no input can produce a bare 500 page
or a stack trace in a response.
"""

from __future__ import annotations

import logging

from django.http import JsonResponse

log = logging.getLogger("inference.api")

_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "internal_error",
    503: "service_unavailable_error",
}


class ApiError(Exception):
    """An error with its HTTP status; raised anywhere in request handling, rendered once."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JsonResponse:
        resp = JsonResponse(self.body(), status=self.status)
        for name, value in self.headers.items():
            resp[name] = value
        return resp


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def internal_error_response(exc: BaseException, render=ApiError.response) -> JsonResponse:
    """The last line of defence: log the trace, answer without it (in the API's shape: `render`)."""
    log.exception("unhandled error in API view", exc_info=exc)
    return render(ApiError(500, "internal server error", code="internal_error"))


def drf_exception_handler(exc, context):
    """DRF's handler, re-shaped into OpenAI's error body."""
    from rest_framework.response import Response
    from rest_framework.views import exception_handler

    response = exception_handler(exc, context)
    if response is None:
        log.exception("unhandled error in DRF view", exc_info=exc)
        return Response(ApiError(500, "internal server error", code="internal_error").body(), status=500)
    detail = response.data.get("detail") if isinstance(response.data, dict) else None
    message = str(detail) if detail is not None else str(response.data)
    code = getattr(detail, "code", None)
    response.data = ApiError(response.status_code, message, code=code).body()
    return response
