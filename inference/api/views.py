"""Async API views: /generate, /v1/completions, /v1/chat/completions, /v1/models, /health.

Views stay thin: validation is in validation.py, the engine request and its history row in
jobs.py, the wire formats in stream_renderers.py / openai_format.py.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found

from ..engine.engine_state import ModelInfo
from ..engine.errors import EngineNotReadyError, PromptTooLongError, QueueFullError, SamplingParamsError
from ..serving import runtime, submission
from ..serving.engine_client import EngineClient
from ..serving.generation_input import GenerationInput
from ..serving.jobs import guard_stream
from ..serving.stats import engine_health
from ..serving.submission import PromptLimitError, RequestRecord
from . import auth, key_limits, sse
from .chat_template import render_request
from .errors import ApiError, bad_request, internal_error_response
from .fim import FimError, infill_prompt
from .reasoning_parsers import plan_reasoning
from .request_body import parse_json_body
from .stream_renderers import OpenAIResponse, generate_events, run_to_end
from .tool_calls import active_tools
from .tool_parsers import served_tool_parser
from .validation import parse_chat, parse_completion, parse_generate


def api_endpoint(*methods: str, public: bool = False, errors=ApiError.response):
    """Method check (405 + Allow), API key check (401; not for `public` endpoints), CSRF
    exemption, and errors rendered by `errors` (an ApiError -> response: OpenAI's shape unless the
    API has its own). The caller lands in `request.api_caller`."""

    def decorate(view):
        @csrf_exempt
        @functools.wraps(view)
        async def wrapper(request, *args, **kwargs):
            if request.method not in methods:
                error = ApiError(405, f"method {request.method} is not allowed here; use {' or '.join(methods)}")
                error.headers["Allow"] = ", ".join(methods)
                return errors(error)
            try:
                request.api_caller = None if public else await auth.require_api_key(request)
                return await view(request, *args, **kwargs)
            except ApiError as exc:
                return errors(exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return internal_error_response(exc, errors)

        return wrapper

    return decorate


# ---- shared steps ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A request's engine client and the model it serves, fetched once per request."""

    engine_client: EngineClient
    info: ModelInfo

    @property
    def name(self) -> str:
        return runtime.served_model_name(self.info) or "unknown"


def ready_model() -> Served:
    """The engine client, ready, and its ModelInfo; 503 otherwise."""
    engine_client = runtime.get_engine_client()
    info = engine_client.model_info if engine_client is not None and engine_client.ready else None
    if info is None:
        reason = "the engine has not been started" if engine_client is None else engine_client.not_ready_reason()
        raise ApiError(503, f"the engine is not ready: {reason}", code="engine_not_ready", headers={"Retry-After": "5"})
    return Served(engine_client, info)


def resolve_model(requested: str | None, served: Served) -> str:
    """The served model's id; an empty or absent name means it (vLLM's rule), any other must be one of its names."""
    if requested and requested not in runtime.accepted_model_names(served.info, served.engine_client):
        raise _model_not_found(requested)
    return served.name


def _model_not_found(name: str) -> ApiError:
    return ApiError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")


async def start_job(request, served: Served, inp: GenerationInput, *, request_id: str, prompt, prompt_text: str, model: str):
    """Submits to the engine (serving/submission.py); a refusal maps to its status and error code."""
    record = RequestRecord(
        request_id=request_id,
        endpoint=inp.endpoint,
        model=model,
        client_address=request.META.get("REMOTE_ADDR") or "",
        stream=inp.stream,
        prompt=prompt_text,
        messages=inp.messages,
        caller=getattr(request, "api_caller", None),
        extras={"tools": inp.tools.tools, "tool_choice": inp.tools.choice} if inp.tools is not None else {},
        tools=active_tools(inp.tools),
        reasoning=inp.reasoning,
    )
    prompt_param = "messages" if inp.messages is not None else "prompt"
    try:
        return await submission.submit(served.engine_client, served.info, record, inp, prompt)
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


# ---- endpoints -------------------------------------------------------------------------------


@api_endpoint("POST")
async def generate(request):
    """The seed's API: SSE events start / token / done (or error)."""
    inp = parse_generate(parse_json_body(request), default_max_tokens=settings.MINIVLLM_GENERATE_DEFAULT_MAX_TOKENS)
    served = ready_model()
    slot = key_limits.acquire(request.api_caller)
    try:
        request_id = _new_id("gen")
        job = await start_job(
            request, served, inp, request_id=request_id, prompt=inp.prompts[0], prompt_text=inp.prompts[0], model=served.name
        )
        return sse.response(slot.hold(guard_stream(generate_events(job), job)))
    finally:
        slot.release_unless_held()


async def refuse_the_batch_if_one_is_refused(request, served: Served, inp, request_id: str, prompts, model: str) -> None:
    """Every prompt of a batch is planned before any is queued: the first that cannot be is
    submitted alone, so it is refused (and recorded) with its own reason, and none runs."""
    for position, (prompt, text) in enumerate(prompts):
        try:
            submission.plan(served.info, prompt, inp)
        except (*submission.REFUSALS, SamplingParamsError):
            job = await start_job(
                request, served, inp, request_id=f"{request_id}-{position}", prompt=prompt, prompt_text=text, model=model
            )
            await job.close()  # only if the engine changed in between: the batch goes ahead without it


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


@api_endpoint("POST")
async def completions(request):
    inp = parse_completion(parse_json_body(request))

    def prompts(info):  # token-id prompts get their text once their ids are checked
        if inp.suffix is not None:  # fill in the middle: each prompt is the code before the gap
            ids = [fim_ids(info, p, inp.suffix, max_tokens=inp.params.max_tokens or 0, param="suffix") for p in inp.prompts]
            return [(i, info.tokenizer.decode(i)) for i in ids]
        return [(p, p if isinstance(p, str) else "") for p in inp.prompts]

    return await serve(request, inp, _new_id("cmpl"), prompts, _openai_reply(inp, "completion"))


@api_endpoint("POST")
async def chat_completions(request):
    # tools are read, written and forced in the served model's format (the default before a model is loaded)
    inp = parse_chat(parse_json_body(request), tool_parser=served_tool_parser())

    def prompts(info):
        text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
        plan_reasoning(inp, info.tokenizer, text)
        return [(text, text)]

    return await serve(request, inp, _new_id("chatcmpl"), prompts, _openai_reply(inp, "chat"))


def fim_ids(info, prefix: str, suffix: str, *, max_tokens: int, param: str, extra=None, prompt: str = "") -> list[int]:
    """A fill-in-the-middle prompt for the served model (api/fim.py); a model without FIM tokens is a 400."""
    try:
        context = info.token_limit or info.max_model_len or 0
        return infill_prompt(info.tokenizer, prefix, suffix, extra, prompt, context=context, max_tokens=max_tokens)
    except FimError as exc:
        raise bad_request(str(exc), param=param, code="fim_not_supported") from None


def _openai_reply(inp: GenerationInput, kind: str):
    """The reply maker `serve` takes, for OpenAI's chat or completions shape."""

    def make(served: Served, model: str, request_id: str, prompts, jobs) -> OpenAIResponse:
        tokenizer = served.info.tokenizer
        return OpenAIResponse(
            request_id,
            model,
            jobs,
            kind=kind,
            include_usage=inp.include_usage,
            tokenizer=tokenizer,
            echo=inp.echo,
            echo_only=inp.echo_only,
            prompt_texts=[text or tokenizer.decode(job.prompt_token_ids) for (_, text), job in zip(prompts, jobs)],
            show_prompt_logprobs="prompt_logprobs" in inp.given,
            tools=active_tools(inp.tools),
            reasoning=inp.reasoning,
        )

    return make


async def serve(request, inp: GenerationInput, request_id: str, make_prompts, make_reply):
    """The flow every generating API shares: readiness (503), model (404), per-key slot (429), one
    job per prompt, then stream or wait. `make_prompts(info)` gives the (prompt, text) pairs;
    `make_reply(served, model, request_id, prompts, jobs)` the API's reply, with `stream()` (SSE
    bytes), `finish()` (the whole body, once every job has ended) and `failed()`. Several prompts get ids `<id>-<position>` (one history row each)."""
    served = ready_model()
    model = resolve_model(inp.model, served)
    prompts = make_prompts(served.info)
    slot = key_limits.acquire(request.api_caller)
    jobs = []
    try:
        if len(prompts) > 1:
            await refuse_the_batch_if_one_is_refused(request, served, inp, request_id, prompts, model)
        try:
            for position, (prompt, text) in enumerate(prompts):
                job_id = request_id if len(prompts) == 1 else f"{request_id}-{position}"
                jobs.append(
                    await start_job(request, served, inp, request_id=job_id, prompt=prompt, prompt_text=text, model=model)
                )
            reply = make_reply(served, model, request_id, prompts, jobs)
            if inp.stream:
                stream = reply.stream()
                for job in jobs:
                    guard_stream(stream, job)
                return sse.response(slot.hold(stream))
        except BaseException:
            for job in jobs:  # the batch is refused whole: the prompts already queued go too
                await job.close()
            raise
        await run_to_end(jobs)
    finally:
        slot.release_unless_held()
    failed = reply.failed()
    if failed is not None:
        raise ApiError(500, f"generation failed: {failed.error}", code="generation_failed")
    return JsonResponse(await reply.finish())


def _model_entry(served: Served) -> dict:
    return {
        "id": served.name,
        "object": "model",
        "created": int(runtime.process_started_at()),
        "owned_by": "mini-vllm",
        "max_model_len": served.info.max_model_len,
    }


@api_endpoint("GET", "HEAD")
async def models(request):
    return JsonResponse({"object": "list", "data": [_model_entry(ready_model())]})


@api_endpoint("GET", "HEAD")
async def model(request, model_id: str):
    """GET /v1/models/{id}: the served model under any of its accepted names, else 404."""
    served = ready_model()
    if model_id not in runtime.accepted_model_names(served.info, served.engine_client):
        raise _model_not_found(model_id)
    return JsonResponse(_model_entry(served))


@api_endpoint("GET", "HEAD", public=True)
async def health(request):
    healthy, body = engine_health()
    return JsonResponse(body, status=200 if healthy else 503)


API_PREFIXES = ("/v1/", "/generate", "/api/", "/stats", "/health", "/tokenize", "/detokenize", "/tokenizer_info", "/infill")


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
