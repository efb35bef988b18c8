"""Async API views: /generate, /v1/completions, /v1/chat/completions, /v1/models, /health.

Views stay thin: validation is in validation.py, the engine request and its history row in
jobs.py, the wire formats in stream_renderers.py / openai_format.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found

from ..engine.errors import EngineNotReadyError, PromptTooLongError, QueueFullError, SamplingParamsError
from ..serving import runtime, submission
from ..serving.jobs import GenerationJob, guard_stream
from ..serving.stats import engine_health
from ..serving.submission import PromptLimitError, RequestRecord
from . import auth, key_limits, sse
from . import openai_format as oai
from .chat_template import render as render_chat
from .errors import ApiError, bad_request, internal_error_response
from .stream_renderers import OpenAIStream, generate_events, run_to_end
from .validation import GenerationInput, parse_chat, parse_completion, parse_generate, parse_json_body


def api_endpoint(*methods: str, public: bool = False):
    """Method check (405 + Allow), API key check (401; not for `public` endpoints), CSRF
    exemption, and errors rendered in OpenAI's shape. The caller lands in `request.api_caller`."""

    def decorate(view):
        @csrf_exempt
        @functools.wraps(view)
        async def wrapper(request, *args, **kwargs):
            if request.method not in methods:
                error = ApiError(405, f"method {request.method} is not allowed here; use {' or '.join(methods)}")
                error.headers["Allow"] = ", ".join(methods)
                return error.response()
            try:
                request.api_caller = None if public else await auth.require_api_key(request)
                return await view(request, *args, **kwargs)
            except ApiError as exc:
                return exc.response()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return internal_error_response(exc)

        return wrapper

    return decorate


# ---- shared steps ------------------------------------------------------------------------------


def _ready_engine_client():
    engine_client = runtime.get_engine_client()
    if engine_client is None or not engine_client.ready:
        reason = "the engine has not been started" if engine_client is None else engine_client.not_ready_reason()
        raise ApiError(503, f"the engine is not ready: {reason}", code="engine_not_ready", headers={"Retry-After": "5"})
    return engine_client


def _resolve_model(requested: str | None, engine_client) -> str:
    served = runtime.model_name(engine_client) or "unknown"
    if requested is not None and requested not in runtime.accepted_model_names(engine_client):
        raise ApiError(404, f"The model `{requested}` does not exist.", param="model", code="model_not_found")
    return served


async def _start_job(request, engine_client, inp: GenerationInput, *, prefix: str, prompt, prompt_text: str, model: str):
    """Submits to the engine (serving/submission.py); a refusal maps to its status and error code."""
    record = RequestRecord(
        request_id=f"{prefix}-{uuid.uuid4().hex}",
        endpoint=inp.endpoint,
        model=model,
        client_address=request.META.get("REMOTE_ADDR") or "",
        stream=inp.stream,
        prompt=prompt_text,
        messages=inp.messages,
        caller=getattr(request, "api_caller", None),
    )
    prompt_param = "messages" if inp.messages is not None else "prompt"
    try:
        return await submission.submit(engine_client, record, inp, prompt)
    except QueueFullError:
        raise ApiError(
            429,
            "the server is at capacity (waiting queue is full); retry shortly",
            code="queue_full",
            headers={"Retry-After": "1"},
        ) from None
    except EngineNotReadyError as exc:
        raise ApiError(503, f"the engine is not ready: {exc}", code="engine_not_ready", headers={"Retry-After": "5"}) from None
    except PromptLimitError as exc:
        raise bad_request(str(exc), param=prompt_param, code="prompt_too_long") from None
    except PromptTooLongError as exc:
        raise bad_request(str(exc), param=prompt_param, code="context_length_exceeded") from None
    except SamplingParamsError as exc:
        param = prompt_param if exc.param == "prompt" else exc.param
        raise bad_request(exc.message, param=param) from None


def _raise_if_failed(job: GenerationJob) -> None:
    if job.finish_reason == "error":
        raise ApiError(500, f"generation failed: {job.error}", code="generation_failed")


# ---- endpoints -------------------------------------------------------------------------------


@api_endpoint("POST")
async def generate(request):
    """The seed's API: SSE events start / token / done (or error)."""
    inp = parse_generate(parse_json_body(request), default_max_tokens=settings.MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS)
    engine_client = _ready_engine_client()
    model = runtime.model_name(engine_client) or ""
    slot = key_limits.acquire(request.api_caller)
    try:
        job = await _start_job(request, engine_client, inp, prefix="gen", prompt=inp.prompt, prompt_text=inp.prompt, model=model)
        return sse.response(slot.hold(guard_stream(generate_events(job), job)))
    finally:
        slot.release_unless_held()


@dataclasses.dataclass(frozen=True)
class _OpenAIKind:
    """What differs between /v1/completions and /v1/chat/completions once the prompt is text."""

    id_prefix: str
    chunks: str  # the OpenAIStream method rendering this kind's SSE chunks
    logprobs: Callable
    body: Callable


_COMPLETION = _OpenAIKind("cmpl", "completion_chunks", oai.completion_logprobs, oai.completion)
_CHAT = _OpenAIKind("chatcmpl", "chat_chunks", oai.chat_logprobs, oai.chat_completion)


@api_endpoint("POST")
async def completions(request):
    inp = parse_completion(parse_json_body(request))
    prompt_text = inp.prompt if isinstance(inp.prompt, str) else ""
    return await _openai_request(request, inp, _COMPLETION, lambda engine_client: (inp.prompt, prompt_text))


@api_endpoint("POST")
async def chat_completions(request):
    inp = parse_chat(parse_json_body(request))

    def prompt(engine_client):
        text = render_chat(runtime.tokenizer(engine_client), inp.messages)
        return text, text

    return await _openai_request(request, inp, _CHAT, prompt)


async def _openai_request(request, inp: GenerationInput, kind: _OpenAIKind, make_prompt):
    """The shared flow: readiness (503), model (404), per-key slot (429), then stream or wait."""
    engine_client = _ready_engine_client()
    model = _resolve_model(inp.model, engine_client)
    prompt, prompt_text = make_prompt(engine_client)
    slot = key_limits.acquire(request.api_caller)
    try:
        job = await _start_job(
            request, engine_client, inp, prefix=kind.id_prefix, prompt=prompt, prompt_text=prompt_text, model=model
        )
        if inp.stream:
            stream = OpenAIStream(job, model=model, include_usage=inp.include_usage)
            chunks = getattr(stream, kind.chunks)()
            return sse.response(slot.hold(guard_stream(chunks, job)))
        await run_to_end(job)
    finally:
        slot.release_unless_held()
    _raise_if_failed(job)
    logprobs = kind.logprobs(job.logprobs) if job.params.logprobs is not None else None
    return JsonResponse(
        kind.body(
            request_id=job.request_id,
            created=int(time.time()),
            model=model,
            text=job.text,
            finish_reason=job.finish_reason,
            logprobs=logprobs,
            prompt_tokens=job.prompt_tokens,
            completion_tokens=job.completion_tokens,
        )
    )


@api_endpoint("GET", "HEAD")
async def models(request):
    engine_client = _ready_engine_client()
    entry = {
        "id": runtime.model_name(engine_client),
        "object": "model",
        "created": int(runtime.process_started_at()),
        "owned_by": "mini-vllm",
        "max_model_len": runtime.max_model_len(engine_client),
    }
    return JsonResponse({"object": "list", "data": [entry]})


@api_endpoint("GET", "HEAD", public=True)
async def health(request):
    healthy, body = engine_health()
    return JsonResponse(body, status=200 if healthy else 503)


API_PREFIXES = ("/v1/", "/generate", "/api/", "/stats", "/health")


def not_found(request, exception=None):
    """handler404: OpenAI's shape on API paths, Django's page elsewhere."""
    if request.path.startswith(API_PREFIXES):
        return ApiError(404, f"no route for {request.path}", code="not_found").response()
    return page_not_found(request, exception)


def server_error(request):
    """handler500: never a stack trace."""
    return ApiError(500, "internal server error", code="internal_error").response()
