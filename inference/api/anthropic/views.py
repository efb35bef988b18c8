"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

A thin edge over the shared request flow (common/endpoint.py, `serve`): the request is read by
anthropic/request.py, the reply written by anthropic/format.py, errors in Anthropic's shape. The
API key is taken from `x-api-key` as well as `Authorization: Bearer` (common/auth.py).
"""

from __future__ import annotations

import asyncio
import uuid

from django.http import JsonResponse

from ...engine.prompt import prompt_token_ids
from ..common.chat_template import render_request
from ..common.endpoint import api_endpoint, serve, served_for
from ..common.reasoning_parsers import plan_reasoning
from ..common.request_body import parse_json_body
from ..common.tool_calls import active_tools
from .format import AnthropicReply, error_response
from .request import parse_count_tokens, parse_messages_request


@api_endpoint("POST", errors=error_response)
async def messages(request):
    body = parse_json_body(request)
    async with served_for(body) as served:
        inp, prompt = parse_messages_request(body, served.tool_parser)

        def prompts(info):
            text = render_request(
                info.tokenizer,
                prompt.messages,
                prompt.tools,
                options=prompt.template_options,
                continue_final=prompt.continue_final,
            )
            plan_reasoning(inp, info.tokenizer, text)
            return [(text, text)]

        def reply(served, model, request_id, prompts, jobs):
            return AnthropicReply(request_id, model, jobs[0], tools=active_tools(prompt.tools), reasoning=inp.reasoning)

        return await serve(request, served, inp, f"msg_{uuid.uuid4().hex}", prompts, reply)


@api_endpoint("POST", errors=error_response)
async def count_tokens(request):
    body = parse_json_body(request)
    async with served_for(body) as served:
        prompt = parse_count_tokens(body, served.tool_parser)
        text = render_request(
            served.info.tokenizer,
            prompt.messages,
            prompt.tools,
            options=prompt.template_options,
            continue_final=prompt.continue_final,
        )
        ids = await asyncio.to_thread(prompt_token_ids, served.info.tokenizer, text)
    return JsonResponse({"input_tokens": len(ids)})
