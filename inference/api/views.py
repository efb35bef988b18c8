"""The seed's /generate (SSE start / token / done events), /health, and the JSON 404 / 500 the
whole site answers API paths with. Each other API has its own folder beside this file."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.views.defaults import page_not_found

from ..serving.jobs import guard_stream
from ..serving.stats import engine_health
from .common import key_limits, sse
from .common.endpoint import api_endpoint, new_id, served_for, start_job
from .common.errors import ApiError
from .common.request_body import parse_json_body
from .openai.request import parse_generate
from .openai.stream_format import generate_events


@api_endpoint("POST")
async def generate(request):
    """The seed's API: SSE events start / token / done (or error)."""
    body = parse_json_body(request)
    inp = parse_generate(body, default_max_tokens=settings.MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS)
    async with served_for(body) as served:
        slot = key_limits.acquire(request.api_caller)
        try:
            request_id = new_id("gen")
            job = await start_job(
                request, served, inp, request_id=request_id, prompt=inp.prompts[0], prompt_text=inp.prompts[0], model=served.name
            )
            return sse.response(slot.hold(guard_stream(generate_events(job), job)))
        finally:
            slot.release_unless_held()


@api_endpoint("GET", "HEAD", public=True)
async def health(request):
    healthy, body = engine_health()
    return JsonResponse(body, status=200 if healthy else 503)


API_PREFIXES = (
    "/v1/",
    "/generate",
    "/api/",
    "/stats",
    "/health",
    "/tokenize",
    "/detokenize",
    "/tokenizer_info",
    "/infill",
    "/models",
)


@api_endpoint("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", public=True)
async def unknown_api_path(request, rest: str = ""):
    """Any other path under /v1/: the API's JSON 404, whatever DEBUG says."""
    raise ApiError(404, f"no route for {request.path}", code="not_found")


def not_found(request, exception=None):
    """handler404: OpenAI's shape on API paths, Django's page elsewhere."""
    if request.path.startswith(API_PREFIXES):
        return ApiError(404, f"no route for {request.path}", code="not_found").response()
    return page_not_found(request, exception)


def server_error(request):
    """handler500: never a stack trace."""
    return ApiError(500, "internal server error", code="internal_error").response()
