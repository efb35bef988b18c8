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
from .anthropic_request import MessagesPrompt, parse_count_tokens, parse_messages_request
from .chat_template import render as render_chat
from .reasoning_parsers import plan_reasoning
from .request_body import parse_json_body
from .tool_parsers import served_tool_parser
from .views import api_endpoint, ready_model, resolve_model, serve


def _render(tokenizer, prompt: MessagesPrompt) -> str:
    tools = prompt.tools.tools if prompt.tools is not None and prompt.tools.active else None
    parser = prompt.tools.parser if prompt.tools is not None else None
    return render_chat(
        tokenizer,
        prompt.messages,
        tools=tools,
        tool_parser=parser,
        continue_final=prompt.continue_final,
        options=prompt.template_options,
    )


@api_endpoint("POST", errors=error_response)
async def messages(request):
    inp, prompt = parse_messages_request(parse_json_body(request), served_tool_parser())

    def prompts(info):
        text = _render(info.tokenizer, prompt)
        plan_reasoning(inp, info.tokenizer, text)
        return [(text, text)]

    def reply(served, model, request_id, prompts, jobs):
        tools = prompt.tools if prompt.tools is not None and prompt.tools.active else None
        return AnthropicReply(request_id, model, jobs[0], tools=tools, reasoning=inp.reasoning)

    return await serve(request, inp, f"msg_{uuid.uuid4().hex}", prompts, reply)


@api_endpoint("POST", errors=error_response)
async def count_tokens(request):
    prompt = parse_count_tokens(parse_json_body(request), served_tool_parser())
    served = ready_model()
    resolve_model(prompt.model, served)
    text = _render(served.info.tokenizer, prompt)
    ids = await asyncio.to_thread(prompt_token_ids, served.info.tokenizer, text)
    return JsonResponse({"input_tokens": len(ids)})
