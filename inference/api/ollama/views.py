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

from django.http import JsonResponse

from ...serving import runtime
from ...serving.generation_input import GenerationInput
from ..common.chat_template import render_request
from ..common.endpoint import Served, api_endpoint, new_id, ready_model, resolve_model, serve
from ..common.errors import ApiError, bad_request
from ..common.reasoning_parsers import plan_reasoning, reasoning_parser_for
from ..common.request_body import parse_json_body
from ..common.sampling_fields import check_unknown_fields
from ..common.tool_calls import active_tools
from ..common.tool_parsers import served_tool_parser
from ..llama.fim import fim_ids
from ..openai.embeddings import embed, embedding_inputs
from .format import OllamaReply, created_at, error_response, ndjson_response
from .request import EMBED_FIELDS, keep_alive_seconds, model_name, parse_chat_request, parse_generate_request

VERSION = "0.12.0"  # the Ollama API version whose shapes these follow (clients gate features on it)


def _reply(kind: str, inp: GenerationInput):
    def make(served: Served, model: str, request_id: str, prompts, jobs) -> OllamaReply:
        return OllamaReply(kind, model, jobs[0], tools=active_tools(inp.tools), reasoning=inp.reasoning)

    return make


async def _serve(request, inp: GenerationInput, kind: str, prompts):
    """`serve` with Ollama's NDJSON stream."""
    return await serve(request, inp, new_id("ollama"), prompts, _reply(kind, inp), stream_response=ndjson_response)


@api_endpoint("POST", errors=error_response)
async def chat(request):
    parsed = parse_chat_request(parse_json_body(request), served_tool_parser())
    inp = parsed.inp

    def prompts(info):
        text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
        plan_reasoning(inp, info.tokenizer, text)
        return [(text, text)]

    return await _serve(request, inp, "chat", prompts)


@api_endpoint("POST", errors=error_response)
async def generate(request):
    parsed = parse_generate_request(parse_json_body(request), served_tool_parser())
    inp = parsed.inp
    if inp is None:  # no prompt: Ollama's way to load a model (it is loaded)
        resolve_model(model_name(parsed.model), ready_model())
        return JsonResponse(
            {"model": parsed.model, "created_at": created_at(), "response": "", "done": True, "done_reason": "load"}
        )

    def prompts(info):
        if inp.messages is not None:
            text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
            plan_reasoning(inp, info.tokenizer, text)
            return [(text, text)]
        if inp.suffix is not None:  # fill in the middle: the prompt is the code before the gap
            ids = fim_ids(info, inp.prompts[0], inp.suffix, max_tokens=inp.params.max_tokens or 0, param="suffix")
            return [(ids, info.tokenizer.decode(ids))]
        return [(inp.prompts[0], inp.prompts[0])]

    return await _serve(request, inp, "generate", prompts)


@api_endpoint("POST", errors=error_response)
async def embed_view(request):
    body = parse_json_body(request)
    check_unknown_fields(body, EMBED_FIELDS)
    keep_alive_seconds(body.get("keep_alive"))
    if "input" not in body:
        raise bad_request("input is required", param="input")
    served = ready_model()
    model = resolve_model(model_name(body.get("model")), served)
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool)):
        raise bad_request("dimensions must be an integer", param="dimensions")
    vectors, prompt_tokens, seconds = await embed(request, served, embedding_inputs(body["input"]), model, dimensions)
    return JsonResponse(
        {
            "model": body.get("model") or model,
            "embeddings": vectors,
            "total_duration": int(seconds * 1e9),
            "load_duration": 0,
            "prompt_eval_count": prompt_tokens,
        }
    )


def _model_file(served: Served) -> str:
    """The served model's file (a GGUF) or folder, as the loader resolves it ("" where it is a hub id)."""
    from ...engine.loader import resolve_source

    try:
        source = resolve_source(served.engine_client.config.model)
    except Exception:  # an engine elsewhere (scale-out) may name a path this process cannot see
        return ""
    if source.is_hub_id:
        return ""
    return os.path.join(source.path, source.gguf_file) if source.gguf_file else source.path


@api_endpoint("POST", errors=error_response)
async def embeddings(request):
    """Ollama's older embedding route: {"model", "prompt"} -> {"embedding"} (one vector)."""
    body = parse_json_body(request)
    if not isinstance(body.get("prompt"), str) or not body["prompt"]:
        raise bad_request("prompt must be a non-empty string", param="prompt")
    keep_alive_seconds(body.get("keep_alive"))
    served = ready_model()
    model = resolve_model(model_name(body.get("model")), served)
    vectors, _, _ = await embed(request, served, [body["prompt"]], model, None)
    return JsonResponse({"embedding": vectors[0]})


def _details(served: Served) -> dict:
    path = _model_file(served)
    return {
        "parent_model": "",
        "format": "gguf" if path.endswith(".gguf") else "safetensors",
        "family": (served.info.architecture or "").split(" ")[0],
        "families": [(served.info.architecture or "").split(" ")[0]],
        "parameter_size": "",
        "quantization_level": served.info.weights or "",
    }


def _entry(served: Served) -> dict:
    """The served model as Ollama lists one."""
    path = _model_file(served)
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    modified = os.path.getmtime(path) if os.path.isfile(path) else runtime.process_started_at()
    return {
        "name": served.name,
        "model": served.name,
        "modified_at": datetime.datetime.fromtimestamp(modified, datetime.UTC).isoformat().replace("+00:00", "Z"),
        "size": size,
        "digest": hashlib.sha256(f"{path}:{size}:{modified}".encode()).hexdigest(),
        "details": _details(served),
    }


@api_endpoint("GET", "HEAD", errors=error_response)
async def tags(request):
    return JsonResponse({"models": [_entry(ready_model())]})


@api_endpoint("GET", "HEAD", errors=error_response)
async def ps(request):
    """The loaded models: the served one, kept loaded (it never expires)."""
    entry = _entry(ready_model())
    return JsonResponse({"models": [{**entry, "expires_at": "9999-12-31T23:59:59Z", "size_vram": 0, "context_length": 0}]})


@api_endpoint("POST", errors=error_response)
async def show(request):
    body = parse_json_body(request)
    served = ready_model()
    resolve_model(model_name(body.get("model") or body.get("name")), served)  # (`name`: older clients' field)
    thinking = reasoning_parser_for(served.info.tokenizer) is not None
    capabilities = (
        ["completion", "tools"] + (["thinking"] if thinking else []) + (["embedding"] if served.info.hidden_size else [])
    )
    template = getattr(served.info.tokenizer, "chat_template", None)
    family = _details(served)["family"]
    return JsonResponse(
        {
            "modelfile": f"FROM {_model_file(served) or served.name}\n",
            "parameters": "",
            "template": template if isinstance(template, str) else "",
            "details": _details(served),
            "model_info": {"general.architecture": family, f"{family}.context_length": served.info.max_model_len},
            "capabilities": capabilities,
            "modified_at": _entry(served)["modified_at"],
        }
    )


@api_endpoint("GET", "HEAD", public=True, errors=error_response)
async def version(request):
    return JsonResponse({"version": VERSION})


@api_endpoint("GET", "HEAD", "POST", "DELETE", errors=error_response)
async def unknown(request, rest: str = ""):
    """Ollama's other paths (pull, push, create, copy, delete, blobs): served models come from files."""
    raise ApiError(404, f"{request.path} is not served here: models are files this server loads (MINIVLLM_MODEL)")
