"""OpenAI's /v1/completions, /v1/chat/completions and /v1/models.

Views stay thin: validation is in openai/request.py, the engine request and its history row in
jobs.py, the wire formats in openai/stream_format.py / openai/format.py.
"""

from __future__ import annotations

from django.http import JsonResponse

from ...serving import runtime
from ...serving.generation_input import GenerationInput
from ..common.chat_template import render_request
from ..common.endpoint import Served, api_endpoint, model_not_found, new_id, ready_model, serve
from ..common.reasoning_parsers import plan_reasoning
from ..common.request_body import parse_json_body
from ..common.tool_calls import active_tools
from ..common.tool_parsers import served_tool_parser
from ..llama.fim import fim_ids
from .request import parse_chat, parse_completion
from .stream_format import OpenAIResponse


@api_endpoint("POST")
async def completions(request):
    inp = parse_completion(parse_json_body(request))

    def prompts(info):  # token-id prompts get their text once their ids are checked
        if inp.suffix is not None:  # fill in the middle: each prompt is the code before the gap
            ids = [fim_ids(info, p, inp.suffix, max_tokens=inp.params.max_tokens or 0, param="suffix") for p in inp.prompts]
            return [(i, info.tokenizer.decode(i)) for i in ids]
        return [(p, p if isinstance(p, str) else "") for p in inp.prompts]

    return await serve(request, inp, new_id("cmpl"), prompts, _openai_reply(inp, "completion"))


@api_endpoint("POST")
async def chat_completions(request):
    # tools are read, written and forced in the served model's format (the default before a model is loaded)
    inp = parse_chat(parse_json_body(request), tool_parser=served_tool_parser())

    def prompts(info):
        text = render_request(info.tokenizer, inp.messages, inp.tools, options=inp.template_options)
        plan_reasoning(inp, info.tokenizer, text)
        return [(text, text)]

    return await serve(request, inp, new_id("chatcmpl"), prompts, _openai_reply(inp, "chat"))


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


def _model_entry(served: Served) -> dict:
    return {
        "id": served.name,
        "object": "model",
        "created": int(runtime.process_started_at()),
        "owned_by": "mini-vllm",
        "max_model_len": served.info.max_model_len,
        # what runs (vLLM and llama-server add their own facts here too): family, attention, formats
        "architecture": served.info.architecture,
        "weights": served.info.weights,
    }


@api_endpoint("GET", "HEAD")
async def models(request):
    return JsonResponse({"object": "list", "data": [_model_entry(ready_model())]})


@api_endpoint("GET", "HEAD")
async def model(request, model_id: str):
    """GET /v1/models/{id}: the served model under any of its accepted names, else 404."""
    served = ready_model()
    if model_id not in runtime.accepted_model_names(served.info, served.engine_client):
        raise model_not_found(model_id)
    return JsonResponse(_model_entry(served))
