"""What every API's views share: the endpoint decorator (method, key, errors), the model a
request names (loaded on demand), submitting a job, and `serve`, the flow each generating
endpoint runs."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from dataclasses import dataclass

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ...engine.engine_state import ModelInfo
from ...engine.errors import EngineNotReadyError, PromptTooLongError, QueueFullError, SamplingParamsError
from ...engine.prompt import prompt_token_ids
from ...serving import runtime, submission
from ...serving.engine_client import EngineClient
from ...serving.generation_input import GenerationInput
from ...serving.jobs import guard_stream
from ...serving.models.keep_alive import parse_keep_alive
from ...serving.models.registry import ModelNotFound, ModelUnavailable
from ...serving.submission import PromptLimitError, RequestRecord
from ..openai.stream_format import run_to_end
from . import auth, key_limits, sse
from .errors import ApiError, bad_request, internal_error_response
from .tool_calls import active_tools
from .tool_parsers import tool_parser_for


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


@dataclass(frozen=True)
class Served:
    """The model a request runs on, ready: its engine client, its facts and its id."""

    engine_client: EngineClient
    info: ModelInfo
    name: str

    @property
    def tool_parser(self):
        """Tools are read, written and forced in this model's format."""
        return tool_parser_for(self.info.tokenizer)


def requested_model(body: dict) -> str | None:
    """The body's `model`: absent or empty means the default model (vLLM's rule)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model must be a string", param="model")
    return model or None


def requested_keep_alive(body: dict) -> float | None:
    """The body's `keep_alive` (Ollama's field, taken on every API): how long the model stays loaded once idle."""
    try:
        return parse_keep_alive(body.get("keep_alive"))
    except ValueError as exc:
        raise bad_request(str(exc), param="keep_alive") from None


@contextlib.asynccontextmanager
async def served_model(requested: str | None, *, keep_alive: float | None = None):
    """The named model, loaded first if it is not (the request waits), held while the block runs:
    404 for a name no model answers to, 503 where it cannot serve (its load failed, no room, the
    server stopping). A stream started inside keeps the model busy after the block ends.
    `keep_alive` becomes the model's once the block ends without an error (a refused request
    changes nothing)."""
    try:
        lease = await model_registry().acquire(requested)
    except ModelNotFound:
        if requested:
            raise model_not_found(requested) from None
        raise bad_request("model is required: this server serves several models and none is the default", param="model") from None
    except ModelUnavailable as exc:
        message = f"the engine is not ready: {exc}" if exc.code == "engine_not_ready" else str(exc)
        raise ApiError(503, message, code=exc.code, headers={"Retry-After": "5"}) from None
    try:
        yield Served(lease.client, lease.info, runtime.api_name(lease.slot))
    except BaseException:
        lease.release()  # a refused request leaves the model's keep-alive as it was
        raise
    lease.release(keep_alive)


def model_registry():
    """The process's model registry; 503 before the engine has been started."""
    models = runtime.get_models()
    if models is None:
        raise ApiError(
            503, "the engine is not ready: the engine has not been started", code="engine_not_ready", headers={"Retry-After": "5"}
        )
    return models


def served_for(body: dict):
    """`served_model` for a request body's `model` and `keep_alive`."""
    return served_model(requested_model(body), keep_alive=requested_keep_alive(body))


def model_not_found(name: str) -> ApiError:
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


def _plan_batch(info: ModelInfo, prompts, inp) -> tuple[list[list[int]], int | None]:
    """Each prompt's token ids (each tokenized once), up to and including the first the engine
    would refuse, and that one's position (None: every prompt can run)."""
    planned = []
    for position, (prompt, _) in enumerate(prompts):
        planned.append(prompt_token_ids(info.tokenizer, prompt))
        try:
            submission.plan(info, planned[-1], inp)
        except (*submission.REFUSALS, SamplingParamsError):
            return planned, position
    return planned, None


async def plan_the_batch(request, served: Served, inp, request_id: str, prompts, model: str) -> list:
    """Every prompt of a batch is planned before any is queued, in one worker thread (a long prompt
    takes milliseconds to tokenize: never on the event loop, which streams every other reply). The
    first that cannot be planned is submitted alone, so it is refused (and recorded) with its own
    reason, and none runs. Returns what to submit: each prompt's token ids, so none is tokenized twice."""
    planned, refused = await asyncio.to_thread(_plan_batch, served.info, prompts, inp)
    if refused is None:
        return planned
    text = prompts[refused][1]
    job = await start_job(
        request, served, inp, request_id=f"{request_id}-{refused}", prompt=planned[refused], prompt_text=text, model=model
    )
    await job.close()  # only if the engine changed in between: the batch goes ahead, the rest planned as submitted
    return planned[:refused] + [prompt for prompt, _ in prompts[refused:]]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


async def serve(
    request, served: Served, inp: GenerationInput, request_id: str, make_prompts, make_reply, *, stream_response=sse.response
):
    """The flow every generating API shares, on the model the view holds (`served_for`): per-key
    slot (429), one job per prompt, then stream or wait. `make_prompts(info)` gives the (prompt, text) pairs;
    `make_reply(served, model, request_id, prompts, jobs)` the API's reply, with `stream()` (the
    stream's bytes, which `stream_response` sends: SSE unless the API streams otherwise),
    `finish()` (the whole body, once every job has ended) and `failed()`. Several prompts get ids
    `<id>-<position>` (one history row each)."""
    model = served.name
    # rendering a chat template and laying out a FIM prompt (which tokenizes) take milliseconds on
    # long input: in a worker thread, so the event loop keeps delivering every other stream's tokens
    prompts = await asyncio.to_thread(make_prompts, served.info)
    slot = key_limits.acquire(request.api_caller)
    jobs = []
    try:
        submitted = [prompt for prompt, _ in prompts]
        if len(prompts) > 1:
            submitted = await plan_the_batch(request, served, inp, request_id, prompts, model)
        try:
            for position, (prompt, (_, text)) in enumerate(zip(submitted, prompts)):
                job_id = request_id if len(prompts) == 1 else f"{request_id}-{position}"
                jobs.append(
                    await start_job(request, served, inp, request_id=job_id, prompt=prompt, prompt_text=text, model=model)
                )
            reply = make_reply(served, model, request_id, prompts, jobs)
            if inp.stream:
                stream = reply.stream()
                for job in jobs:
                    guard_stream(stream, job)
                return stream_response(slot.hold(stream))
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
