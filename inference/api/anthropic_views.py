"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

A thin edge over the shared request flow (views.serve): the request is read by
anthropic_request.py, the reply written by anthropic_format.py, errors in Anthropic's shape. The
API key is taken from `x-api-key` as well as `Authorization: Bearer` (auth.py).
"""

from __future__ import annotations

import asyncio
import uuid

from django.http import JsonResponse

from ..engine.prompt import prompt_token_ids
from .anthropic_format import AnthropicReply, error_response
from .anthropic_request import parse_count_tokens, parse_messages_request
from .chat_template import render_request
from .reasoning_parsers import plan_reasoning
from .request_body import parse_json_body
from .tool_calls import active_tools
from .tool_parsers import served_tool_parser
from .views import api_endpoint, ready_model, resolve_model, serve


@api_endpoint("POST", errors=error_response)
async def messages(request):
    inp, prompt = parse_messages_request(parse_json_body(request), served_tool_parser())

    def prompts(info):
        text = render_request(
            info.tokenizer, prompt.messages, prompt.tools, options=prompt.template_options, continue_final=prompt.continue_final
        )
        plan_reasoning(inp, info.tokenizer, text)
        return [(text, text)]

    def reply(served, model, request_id, prompts, jobs):
        return AnthropicReply(request_id, model, jobs[0], tools=active_tools(prompt.tools), reasoning=inp.reasoning)

    return await serve(request, inp, f"msg_{uuid.uuid4().hex}", prompts, reply)


@api_endpoint("POST", errors=error_response)
async def count_tokens(request):
    prompt = parse_count_tokens(parse_json_body(request), served_tool_parser())
    served = ready_model()
    resolve_model(prompt.model, served)
    text = render_request(
        served.info.tokenizer,
        prompt.messages,
        prompt.tools,
        options=prompt.template_options,
        continue_final=prompt.continue_final,
    )
    ids = await asyncio.to_thread(prompt_token_ids, served.info.tokenizer, text)
    return JsonResponse({"input_tokens": len(ids)})
