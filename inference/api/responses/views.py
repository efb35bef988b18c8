"""OpenAI's Responses API: POST /v1/responses, GET / DELETE /v1/responses/{id},
GET /v1/responses/{id}/input_items, POST /v1/responses/input_tokens.

A thin edge over the shared request flow (common/endpoint.py, `serve`): the request is read by
responses/request.py, the reply written by responses/format.py. With `store` (default true) the
finished response is kept in the database (stored_responses.py), so retrieval, deletion, input
items and `previous_response_id` work from any web process and across restarts; a response is
visible to the API key that made it only (another key gets a 404, as for a missing one).
"""

from __future__ import annotations

import asyncio
import uuid

from django.http import JsonResponse

from ... import stored_responses
from ...engine.prompt import prompt_token_ids
from ..common.chat_template import render_request
from ..common.endpoint import api_endpoint, serve, served_for
from ..common.errors import ApiError, bad_request
from ..common.reasoning_parsers import plan_reasoning
from ..common.request_body import parse_json_body
from ..common.tool_calls import active_tools
from .format import ResponsesReply, reply_turn
from .request import ResponsesPrompt, parse_input_tokens, parse_responses_request

INPUT_ITEMS_LIMIT = 100  # OpenAI's most per page


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", param="response_id", code="not_found")


async def _earlier(prompt: ResponsesPrompt, owner: str) -> list[dict]:
    """The stored conversation `previous_response_id` continues, rebuilt along its chain (404 if
    this key has none such, or if a response of the chain was deleted or has expired: it names it)."""
    if prompt.previous_response_id is None:
        return []
    try:
        return await stored_responses.conversation(prompt.previous_response_id, owner)
    except stored_responses.BrokenChain as broken:
        message = f"Response with id '{broken.missing}' not found."
        if broken.missing != prompt.previous_response_id:
            message = (
                f"Response with id '{broken.missing}' not found: the conversation of '{prompt.previous_response_id}' "
                "continues it, and it was deleted or has expired."
            )
        raise ApiError(404, message, param="previous_response_id", code="not_found") from None


@api_endpoint("POST")
async def create(request):
    body = parse_json_body(request)
    async with served_for(body) as served:
        return await _create(request, body, served)


async def _create(request, body: dict, served):
    inp, parsed = parse_responses_request(body, served.tool_parser)
    prompt, owner = parsed.prompt, stored_responses.owner_of(request.api_caller)
    earlier = await _earlier(prompt, owner)
    inp.messages = prompt.conversation(earlier)

    def prompts(info):
        text = render_request(
            info.tokenizer, inp.messages, prompt.tools, options=prompt.template_options, token_limit=info.token_limit
        )
        plan_reasoning(inp, info.tokenizer, text)
        return [(text, text)]

    def reply(served, model, request_id, prompts, jobs):
        job = jobs[0]

        async def store(response: dict) -> None:
            await stored_responses.save(
                response=response,
                model=model,
                owner=owner,
                input_items=prompt.items,
                messages=prompt.messages
                + [reply_turn(response["output"])],  # this turn only: the earlier ones are the previous response's
                previous=prompt.previous_response_id,
            )

        return ResponsesReply(
            request_id,
            model,
            job,
            parsed.echoed,
            tools=active_tools(prompt.tools),
            on_done=store if parsed.store else None,
            reasoning=inp.reasoning,
        )

    return await serve(request, served, inp, f"resp_{uuid.uuid4().hex}", prompts, reply)


@api_endpoint("GET", "DELETE")
async def stored(request, response_id: str):
    """GET: the stored response; DELETE: remove it."""
    owner = stored_responses.owner_of(request.api_caller)
    if request.method == "DELETE":
        if not await stored_responses.delete(response_id, owner):
            raise _not_found(response_id)
        return JsonResponse({"id": response_id, "object": "response", "deleted": True})
    if request.GET.get("stream") in ("true", "1"):
        raise bad_request("streaming a stored response again is not supported", param="stream")
    found = await stored_responses.find(response_id, owner)
    if found is None:
        raise _not_found(response_id)
    return JsonResponse(found.response)


@api_endpoint("GET")
async def input_items(request, response_id: str):
    """The response's input items, a cursor page (`order` asc|desc, default desc; `limit`; `after`)."""
    found = await stored_responses.find(response_id, stored_responses.owner_of(request.api_caller))
    if found is None:
        raise _not_found(response_id)
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_request("order must be asc or desc", param="order")
    try:
        limit = int(request.GET.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= INPUT_ITEMS_LIMIT:
        raise bad_request(f"limit must be an integer in [1, {INPUT_ITEMS_LIMIT}]", param="limit")
    items = list(found.input_items)
    if order == "desc":
        items.reverse()
    after = request.GET.get("after")
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise bad_request(f"no input item {after!r} in this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return JsonResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


@api_endpoint("POST")
async def input_tokens(request):
    """The prompt's token count, as /v1/responses would render it (previous_response_id included)."""
    body = parse_json_body(request)
    async with served_for(body) as served:
        prompt = parse_input_tokens(body, served.tool_parser)
        messages = prompt.conversation(await _earlier(prompt, stored_responses.owner_of(request.api_caller)))
        info = served.info

        def count() -> int:  # rendered and tokenized off the event loop, as a response's prompt is
            text = render_request(
                info.tokenizer, messages, prompt.tools, options=prompt.template_options, token_limit=info.token_limit
            )
            return len(prompt_token_ids(info.tokenizer, text))

        return JsonResponse({"object": "response.input_tokens", "input_tokens": await asyncio.to_thread(count)})


@api_endpoint("POST")
async def cancel(request, response_id: str):
    """Only background responses can be cancelled, and this server runs none."""
    raise bad_request("only background responses can be cancelled, and this server runs none", param="response_id")
