"""OpenAI's response shapes for /v1/completions and /v1/chat/completions (whole and chunked)."""

from __future__ import annotations

from ...engine.outputs import TokenLogprob


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    prediction: tuple[int, int] | None = None,
    speculation: tuple[int, int] | None = None,
) -> dict:
    """Token counts; `prompt_tokens_details.cached_tokens` is what the prefix cache served,
    `completion_tokens_details.reasoning_tokens` what a thinking model spent reasoning and, for a
    request with a prediction (its token count, those taken into the reply as guesses),
    `accepted_prediction_tokens` / `rejected_prediction_tokens` as OpenAI reports them: the
    prediction's tokens the reply took, and the rest. `speculation` (guessed, accepted), when the
    engine guessed at all, is the `spec_decode` extra."""
    body = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        body["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    details = {}
    if reasoning_tokens is not None:
        details["reasoning_tokens"] = reasoning_tokens
    if prediction is not None:
        offered, accepted = prediction
        details.update(accepted_prediction_tokens=accepted, rejected_prediction_tokens=max(0, offered - accepted))
    if details:
        body["completion_tokens_details"] = details
    if speculation is not None and speculation[0]:
        body["spec_decode"] = {"num_draft_tokens": speculation[0], "num_accepted_tokens": speculation[1]}
    return body


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def completion_logprobs(logprobs: list[TokenLogprob] | None, offset: int = 0, prompt=None) -> dict | None:
    """/v1/completions' legacy shape: parallel lists plus text offsets. With echo, `prompt` is the
    prompt's (token text, TokenLogprob or None) pairs, listed first: the first token has no logprob."""
    if logprobs is None:
        return None
    tokens, token_logprobs, top, offsets = [], [], [], []
    for text, item in prompt or []:
        tokens.append(text)
        token_logprobs.append(item.logprob if item is not None else None)
        top.append({t: lp for _, t, lp in item.top} if item is not None and item.top else None)
        offsets.append(offset)
        offset += len(text)
    for item in logprobs:
        tokens.append(item.token)
        token_logprobs.append(item.logprob)
        top.append({text: lp for _, text, lp in item.top} if item.top else None)
        offsets.append(offset)
        offset += len(item.token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def prompt_logprobs(items: list[TokenLogprob | None] | None) -> list | None:
    """vLLM's `prompt_logprobs`: per prompt position (the first is null), token id -> logprob,
    rank and decoded text, for the prompt's own token and the top alternatives."""
    if items is None:
        return None
    result = []
    for item in items:
        if item is None:
            result.append(None)
            continue
        entry = {str(item.token_id): {"logprob": item.logprob, "rank": None, "decoded_token": item.token}}
        for rank, (token_id, text, lp) in enumerate(item.top, start=1):
            if token_id == item.token_id:
                entry[str(token_id)]["rank"] = rank
            else:
                entry[str(token_id)] = {"logprob": lp, "rank": rank, "decoded_token": text}
        result.append(entry)
    return result


def chat_logprobs(logprobs: list[TokenLogprob] | None) -> dict | None:
    if logprobs is None:
        return None
    return {
        "content": [
            {
                "token": item.token,
                "logprob": item.logprob,
                "bytes": _bytes(item.token),
                "top_logprobs": [{"token": text, "logprob": lp, "bytes": _bytes(text)} for _, text, lp in item.top],
            }
            for item in logprobs
        ]
    }


def completion(*, request_id, created, model, choices: list[dict], usage: dict) -> dict:
    """`choices`: each {"index", "text", "logprobs", "finish_reason", "stop_reason"[, "prompt_logprobs"]}."""
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def completion_choice(*, index, text, logprobs=None, finish_reason=None, stop_reason=None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason, "stop_reason": stop_reason}


def completion_chunk(*, request_id, created, model, choices: list[dict]) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": None,
    }


def chat_completion(*, request_id, created, model, choices: list[dict], usage: dict, prompt_logprobs=None) -> dict:
    body = {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
    }
    if prompt_logprobs is not None:
        body["prompt_logprobs"] = prompt_logprobs
    return body


def chat_choice(*, index, text, logprobs=None, finish_reason=None, stop_reason=None, reasoning=None) -> dict:
    message = {"role": "assistant", "content": text}
    if reasoning is not None:  # vLLM's two names for a thinking model's reasoning
        message["reasoning_content"] = message["reasoning"] = reasoning
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


def chat_chunk(
    *, request_id, created, model, index: int, delta: dict, finish_reason=None, logprobs=None, stop_reason=None
) -> dict:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": None,
    }


def usage_chunk(*, request_id, created, model, object_name, usage: dict) -> dict:
    """The extra last chunk `stream_options.include_usage` asks for: no choices, just usage."""
    return {
        "id": request_id,
        "object": object_name,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }


def error_body(message: str, *, type_: str = "internal_error", code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
