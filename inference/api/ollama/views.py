"""Ollama's API, for the apps built on it (Open WebUI, Continue, editor plugins, the `ollama`
client): /api/chat and /api/generate (NDJSON streams), /api/embed, and the model listings
/api/tags, /api/ps, /api/show, /api/version.

A thin edge over the shared request flow (common/endpoint.py, `serve`): requests are read by
ollama/request.py into OpenAI's bodies, replies written by ollama/format.py, errors in Ollama's
shape ({"error": ...}). The API keys hold here as on every API.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import time

from django.http import JsonResponse

from ...serving import runtime
from ...serving.generation_input import GenerationInput
from ...serving.models.registry import ModelNotFound, ModelUnavailable
from ..common.chat_template import render_request
from ..common.endpoint import Served, api_endpoint, model_not_found, new_id, requested_keep_alive, serve, served_model
from ..common.errors import ApiError, bad_request
from ..common.reasoning_parsers import plan_reasoning, reasoning_parser_for
from ..common.request_body import parse_json_body
from ..common.sampling_fields import check_unknown_fields
from ..common.tool_calls import active_tools
from ..llama.fim import fim_ids
from ..openai.embeddings import embed, embedding_inputs
from .format import OllamaReply, created_at, error_response, ndjson_response
from .request import EMBED_FIELDS, model_name, parse_chat_request, parse_generate_request

VERSION = "0.12.0"  # the Ollama API version whose shapes these follow (clients gate features on it)


def _body(request) -> dict:
    """The JSON body, whatever its Content-Type says (Ollama's rule)."""
    return parse_json_body(request, any_content_type=True)


def _reply(kind: str, inp: GenerationInput):
    def make(served: Served, model: str, request_id: str, prompts, jobs) -> OllamaReply:
        return OllamaReply(kind, model, jobs[0], tools=active_tools(inp.tools), reasoning=inp.reasoning)

    return make


async def _serve(request, served: Served, inp: GenerationInput, kind: str, prompts):
    """`serve` with Ollama's NDJSON stream."""
    return await serve(request, served, inp, new_id("ollama"), prompts, _reply(kind, inp), stream_response=ndjson_response)


def _served(body: dict, name_field: str = "model"):
    """The model the body names (`name:latest` is `name`), held for the request; its keep_alive
    applies from this request on (as Ollama's)."""
    requested = model_name(body.get(name_field))
    if requested is not None and not isinstance(requested, str):
        raise bad_request(f"{name_field} must be a string", param=name_field)
    return served_model(requested or None, keep_alive=requested_keep_alive(body))


@api_endpoint("POST", errors=error_response)
async def chat(request):
    body = _body(request)
    if body.get("messages") in (None, []):  # Ollama's load (or, with keep_alive 0, unload) call
        return await _load_or_unload(body)
    async with _served(body) as served:
        parsed = parse_chat_request(body, served.tool_parser)
        inp = parsed.inp

        def prompts(info):
            text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
            plan_reasoning(inp, info.tokenizer, text)
            return [(text, text)]

        return await _serve(request, served, inp, "chat", prompts)


async def _load_or_unload(body: dict) -> JsonResponse:
    """A chat or generate with nothing to answer: loads the model, or unloads it where keep_alive is 0."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad_request("model is required", param="model")
    keep_alive = requested_keep_alive(body)
    models = runtime.get_models()
    if keep_alive == 0 and models is not None:
        try:
            await models.unload(model_name(body["model"]))
        except ModelNotFound:
            raise model_not_found(body["model"]) from None
        except ModelUnavailable as exc:  # remote mode: the workers hold the models
            raise ApiError(409, str(exc), code=exc.code) from None
        reason = "unload"
    else:
        async with _served(body):
            reason = "load"
    done = {"model": body["model"], "created_at": created_at(), "done": True, "done_reason": reason}
    if "messages" in body:
        return JsonResponse({**done, "message": {"role": "assistant", "content": ""}})
    return JsonResponse({**done, "response": ""})


@api_endpoint("POST", errors=error_response)
async def generate(request):
    body = _body(request)
    if body.get("prompt") in (None, "") and body.get("suffix") in (None, ""):
        return await _load_or_unload(body)
    async with _served(body) as served:
        return await _generate(request, body, served)


async def _generate(request, body: dict, served: Served):
    templated = bool(getattr(served.info.tokenizer, "chat_template", None))
    parsed = parse_generate_request(body, served.tool_parser, templated=templated)
    inp = parsed.inp

    def prompts(info):
        if inp.messages is not None:
            text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
            plan_reasoning(inp, info.tokenizer, text)
            return [(text, text)]
        if inp.suffix is not None:  # fill in the middle: the prompt is the code before the gap
            ids = fim_ids(info, inp.prompts[0], inp.suffix, max_tokens=inp.params.max_tokens or 0, param="suffix")
            return [(ids, info.tokenizer.decode(ids))]
        return [(inp.prompts[0], inp.prompts[0])]

    return await _serve(request, served, inp, "generate", prompts)


@api_endpoint("POST", errors=error_response)
async def embed_view(request):
    body = _body(request)
    check_unknown_fields(body, EMBED_FIELDS)
    if "input" not in body:
        raise bad_request("input is required", param="input")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool)):
        raise bad_request("dimensions must be an integer", param="dimensions")
    inputs = embedding_inputs(body["input"])
    async with _served(body) as served:
        model = served.name
        vectors, prompt_tokens, seconds = await embed(request, served, inputs, model, dimensions)
    return JsonResponse(
        {
            "model": body.get("model") or model,
            "embeddings": vectors,
            "total_duration": int(seconds * 1e9),
            "load_duration": 0,
            "prompt_eval_count": prompt_tokens,
        }
    )


@api_endpoint("POST", errors=error_response)
async def embeddings(request):
    """Ollama's older embedding route: {"model", "prompt"} -> {"embedding"} (one vector)."""
    body = _body(request)
    if not isinstance(body.get("prompt"), str) or not body["prompt"]:
        raise bad_request("prompt must be a non-empty string", param="prompt")
    async with _served(body) as served:
        vectors, _, _ = await embed(request, served, [body["prompt"]], served.name, None)
    return JsonResponse({"embedding": vectors[0]})


def _model_file(model_path: str | None) -> str:
    """A model's file (a GGUF) or folder, as the loader resolves it ("" where it is a hub id)."""
    from ...engine.loader import resolve_source

    try:
        source = resolve_source(model_path)
    except Exception:  # an engine elsewhere (scale-out) may name a path this process cannot see
        return ""
    if source.is_hub_id:
        return ""
    return os.path.join(source.path, source.gguf_file) if source.gguf_file else source.path


def _details(path: str, info) -> dict:
    family = re.match(r"\w*", (info.architecture if info else None) or "")[0]
    return {
        "parent_model": "",
        "format": "gguf" if path.endswith(".gguf") else "safetensors",
        "family": family,
        "families": [family] if family else [],
        "parameter_size": "",
        "quantization_level": (info.weights if info else None) or "",
    }


def _entry(model: dict) -> dict:
    """A model of the catalogue (runtime.models_described) as Ollama lists one."""
    path = _model_file(model["path"])
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    modified = os.path.getmtime(path) if os.path.isfile(path) else runtime.process_started_at()
    return {
        "name": model["id"],
        "model": model["id"],
        "modified_at": _iso(modified),
        "size": size,
        "digest": hashlib.sha256(f"{path}:{size}:{modified}".encode()).hexdigest(),
        "details": _details(path, model["info"]),
    }


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat().replace("+00:00", "Z")


@api_endpoint("GET", "HEAD", errors=error_response)
async def tags(request):
    """Every model the server can serve, loaded or not."""
    return JsonResponse({"models": [_entry(model) for model in runtime.models_described()]})


@api_endpoint("GET", "HEAD", errors=error_response)
async def ps(request):
    """The loaded models, each with when its keep-alive runs out (never: far in the future) and the
    memory its load took."""
    loaded = []
    for model in runtime.models_described():
        if model["status"] != "loaded":
            continue
        keep_alive = model["keep_alive"]
        expires = "9999-12-31T23:59:59Z"
        if keep_alive >= 0:  # a busy model's idle clock starts again when its last request ends
            expires = _iso(time.time() + max(0.0, keep_alive - (0.0 if model["in_flight"] else model["idle_seconds"])))
        info = model["info"]
        size = model["memory_bytes"] or 0
        context = (info.max_model_len if info is not None else None) or 0
        loaded.append({**_entry(model), "expires_at": expires, "size": size, "size_vram": 0, "context_length": context})
    return JsonResponse({"models": loaded})


@api_endpoint("POST", errors=error_response)
async def show(request):
    """A model's template, family, context length and capabilities: read from it loaded (a
    request that names an unloaded model loads it, as any other)."""
    body = _body(request)
    name_field = "model" if body.get("model") else "name"  # (`name`: older clients' field)
    async with _served(body, name_field) as served:
        info = served.info
    path = _model_file(served.engine_client.config.model)
    thinking = reasoning_parser_for(info.tokenizer) is not None
    capabilities = ["completion", "tools"] + (["thinking"] if thinking else []) + (["embedding"] if info.hidden_size else [])
    template = getattr(info.tokenizer, "chat_template", None)
    details = _details(path, info)
    family = details["family"]
    modified = os.path.getmtime(path) if os.path.isfile(path) else runtime.process_started_at()
    return JsonResponse(
        {
            "modelfile": f"FROM {path or served.name}\n",
            "parameters": "",
            "template": template if isinstance(template, str) else "",
            "details": details,
            "model_info": {"general.architecture": family, f"{family}.context_length": info.max_model_len},
            "capabilities": capabilities,
            "modified_at": _iso(modified),
        }
    )


@api_endpoint("GET", "HEAD", public=True, errors=error_response)
async def version(request):
    return JsonResponse({"version": VERSION})


@api_endpoint("GET", "HEAD", "POST", "DELETE", errors=error_response)
async def unknown(request, rest: str = ""):
    """Ollama's other paths (pull, push, create, copy, delete, blobs): served models come from files."""
    raise ApiError(
        404, f"{request.path} is not served here: models are files this server loads (MINIVLLM_MODEL, MINIVLLM_MODELS_DIR)"
    )
