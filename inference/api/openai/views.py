"""OpenAI's /v1/completions, /v1/chat/completions and /v1/models.

Views stay thin: validation is in openai/request.py, the engine request and its history row in
jobs.py, the wire formats in openai/stream_format.py / openai/format.py.
"""

from __future__ import annotations

from django.http import JsonResponse

from ...serving import runtime
from ...serving.generation_input import GenerationInput
from ...serving.models.registry import ModelNotFound
from ..common.chat_template import render_request
from ..common.endpoint import Served, api_endpoint, model_not_found, model_registry, new_id, serve, served_for
from ..common.reasoning_parsers import plan_reasoning
from ..common.request_body import parse_json_body
from ..common.tool_calls import active_tools
from ..llama.fim import fim_ids
from .request import parse_chat, parse_completion
from .stream_format import OpenAIResponse


@api_endpoint("POST")
async def completions(request):
    body = parse_json_body(request)
    inp = parse_completion(body)

    def prompts(info):  # token-id prompts get their text once their ids are checked
        if inp.suffix is not None:  # fill in the middle: each prompt is the code before the gap
            ids = [fim_ids(info, p, inp.suffix, max_tokens=inp.params.max_tokens or 0, param="suffix") for p in inp.prompts]
            return [(i, info.tokenizer.decode(i)) for i in ids]
        return [(p, p if isinstance(p, str) else "") for p in inp.prompts]

    async with served_for(body) as served:
        return await serve(request, served, inp, new_id("cmpl"), prompts, _openai_reply(inp, "completion"))


@api_endpoint("POST")
async def chat_completions(request):
    body = parse_json_body(request)
    async with served_for(body) as served:
        inp = parse_chat(body, tool_parser=served.tool_parser)

        def prompts(info):
            text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
            plan_reasoning(inp, info.tokenizer, text)
            return [(text, text)]

        return await serve(request, served, inp, new_id("chatcmpl"), prompts, _openai_reply(inp, "chat"))


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
            continuous_usage=inp.continuous_usage,
            tokenizer=tokenizer,
            echo=inp.echo,
            echo_only=inp.echo_only,
            prompt_texts=[text or tokenizer.decode(job.prompt_token_ids) for (_, text), job in zip(prompts, jobs)],
            show_prompt_logprobs="prompt_logprobs" in inp.given,
            tools=active_tools(inp.tools),
            reasoning=inp.reasoning,
        )

    return make


def model_entry(entry: dict) -> dict:
    """One model of the catalogue (ModelRegistry.describe) as OpenAI lists it, with llama-server
    router's `status`; what runs (family, attention, formats) once it is loaded."""
    listed = {
        "id": entry["id"],
        "object": "model",
        "created": int(runtime.process_started_at()),
        "owned_by": "mini-vllm",
        "status": {"value": entry["status"], **({"failed": True, "reason": entry["error"]} if entry.get("error") else {})},
    }
    info = entry.get("info")
    if info is not None:
        listed |= {"max_model_len": info.max_model_len, "architecture": info.architecture, "weights": info.weights}
    return listed


def listed_models() -> list[dict]:
    model_registry()  # 503 before the engine has been started
    return [model_entry(entry) for entry in runtime.models_described()]


@api_endpoint("GET", "HEAD")
async def models(request):
    """GET /v1/models (and llama-server router's GET /models): every model, with its status."""
    return JsonResponse({"object": "list", "data": listed_models()})


@api_endpoint("GET", "HEAD")
async def model(request, model_id: str):
    """GET /v1/models/{id}: a model under any of the names it answers to, else 404."""
    models = runtime.get_models()
    try:
        slot = models.find(model_id) if models is not None else None
    except ModelNotFound:
        raise model_not_found(model_id) from None
    for entry in listed_models():
        if slot is not None and entry["id"] == runtime.api_name(slot):
            return JsonResponse(entry)
    raise model_not_found(model_id)
