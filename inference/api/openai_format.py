"""OpenAI's response shapes for /v1/completions and /v1/chat/completions (whole and chunked)."""

from __future__ import annotations

from ..engine.outputs import TokenLogprob

# Engine reasons map 1:1 except "error", which ends a stream with an error event instead.
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def completion_logprobs(logprobs: list[TokenLogprob] | None, offset: int = 0) -> dict | None:
    """/v1/completions' legacy shape: parallel lists plus text offsets."""
    if logprobs is None:
        return None
    tokens, token_logprobs, top, offsets = [], [], [], []
    for item in logprobs:
        tokens.append(item.token)
        token_logprobs.append(item.logprob)
        top.append({text: lp for _, text, lp in item.top} if item.top else None)
        offsets.append(offset)
        offset += len(item.token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


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


def completion(*, request_id, created, model, text, finish_reason, logprobs, prompt_tokens, completion_tokens) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def completion_chunk(*, request_id, created, model, text, finish_reason=None, logprobs=None) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": None,
    }


def chat_completion(*, request_id, created, model, text, finish_reason, logprobs, prompt_tokens, completion_tokens) -> dict:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chat_chunk(*, request_id, created, model, delta: dict, finish_reason=None, logprobs=None) -> dict:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": None,
    }


def usage_chunk(*, request_id, created, model, object_name, prompt_tokens, completion_tokens) -> dict:
    """The extra last chunk `stream_options.include_usage` asks for: no choices, just usage."""
    return {
        "id": request_id,
        "object": object_name,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def error_body(message: str, *, type_: str = "internal_error", code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
