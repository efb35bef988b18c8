"""The request fields every API shares: sampling values, n, logit_bias, stream flags, max_tokens
and the server's caps on them. Each check raises an ApiError naming the field as the client
sent it; SamplingParams itself checks the values (its SamplingParamsError.param is mapped back
to the client's name, e.g. `max_new_tokens`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from ...engine.sample.sampling_params import SamplingParams, SamplingParamsError
from .errors import bad_request

ENGINE_SAMPLING_FIELDS = {
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "min_tokens",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "include_stop_str_in_output",
    "cache_salt",  # vLLM's: cached prompt blocks shared only among requests with the same salt
}


# llama-server's names for fields every API has: read as the field itself.
ALIASES = {"n_predict": "max_tokens", "repeat_penalty": "repetition_penalty"}


def without_nulls(body: dict) -> dict:
    """An explicit null means "use the default", as OpenAI clients assume."""
    return {key: value for key, value in body.items() if value is not None}


def with_aliases(body: dict) -> dict:
    """llama-server's names (`n_predict`, `repeat_penalty`) as the fields they name; both given must agree."""
    body = dict(body)
    for alias, name in ALIASES.items():
        if alias in body:
            value = body.pop(alias)
            if alias == "n_predict" and value == -1:  # llama-server's "no limit": the default
                continue
            if name in body and body[name] != value:
                raise bad_request(f"{alias} and {name} disagree; send only one", param=alias)
            body[name] = value
    return body


def check_unknown_fields(body: dict, allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad_request(f"unrecognized request argument supplied: {unknown[0]}", param=unknown[0], code="unknown_field")


def expect(body: dict, name: str, kind: type | tuple, what: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise bad_request(f"{name} must be {what}, got a boolean", param=name)
    if not isinstance(value, kind):
        raise bad_request(f"{name} must be {what}, got {type(value).__name__}", param=name)
    return value


def stream_flags(body: dict, *, default_stream: bool) -> tuple[bool, bool, bool]:
    """(stream, include_usage: the last chunk carries the usage, continuous_usage: every chunk
    carries the counts so far, vLLM's `continuous_usage_stats`, which needs include_usage too)."""
    stream = expect(body, "stream", bool, "a boolean")
    stream = default_stream if stream is None else stream
    options = expect(body, "stream_options", dict, "an object")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad_request("stream_options is only allowed when stream is true", param="stream_options")
        unknown = set(options) - {"include_usage", "continuous_usage_stats"}
        if unknown:
            raise bad_request(f"unknown stream_options field: {sorted(unknown)[0]}", param="stream_options")
        include_usage = options.get("include_usage", False)
        continuous = options.get("continuous_usage_stats", False)
        for name, value in (("include_usage", include_usage), ("continuous_usage_stats", continuous)):
            if not isinstance(value, bool):
                raise bad_request(f"stream_options.{name} must be a boolean", param=f"stream_options.{name}")
        return stream, include_usage, include_usage and continuous
    return stream, include_usage, False


def choices_n(body: dict) -> int:
    """n, and best_of only where it equals n (vLLM V1 dropped best_of > n: it is refused)."""
    n = expect(body, "n", int, "an integer")
    n = 1 if n is None else n
    if not 1 <= n <= SamplingParams.MAX_N:
        raise bad_request(f"n must be in [1, {SamplingParams.MAX_N}], got {n}", param="n")
    best_of = expect(body, "best_of", int, "an integer")
    if best_of is not None and best_of != n:
        raise bad_request(f"best_of must equal n ({n}): a best_of above n is not supported", param="best_of")
    return n


def logit_bias(body: dict) -> dict[int, float]:
    """OpenAI's {"token id": bias}, bias in [-100, 100]; the ids are checked against the vocabulary on submit."""
    bias = expect(body, "logit_bias", dict, "an object mapping token ids to numbers")
    result = {}
    for key, value in (bias or {}).items():
        try:
            token_id = int(key)
        except ValueError:
            raise bad_request(f"logit_bias keys must be token ids, got {key!r}", param="logit_bias") from None
        if token_id < 0 or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad_request("logit_bias maps token ids (>= 0) to numbers", param="logit_bias")
        if not -100 <= value <= 100:  # compared before float(): a huge integer would overflow it
            raise bad_request(f"logit_bias values must be in [-100, 100], got {value}", param="logit_bias")
        result[token_id] = float(value)
    return result


def reject_unsupported(body: dict) -> None:
    """OpenAI features this server does not implement: refuse rather than silently ignore."""
    if body.get("functions") or body.get("function_call") not in (None, "none"):
        raise bad_request("the legacy functions / function_call fields are not supported: use tools", param="functions")


def model_name(body: dict) -> str | None:
    return expect(body, "model", str, "a string")


def sampling_params(body: dict, *, max_tokens: int, max_tokens_param: str, logprobs: int | None, **extra) -> SamplingParams:
    kwargs = {name: body[name] for name in ENGINE_SAMPLING_FIELDS if name in body}
    kwargs["max_tokens"] = max_tokens
    kwargs.update(extra)
    if logprobs is not None:
        kwargs["logprobs"] = logprobs
    try:
        return SamplingParams(**kwargs)
    except SamplingParamsError as exc:
        param = max_tokens_param if exc.param == "max_tokens" else exc.param
        message = exc.message.replace("max_tokens", max_tokens_param) if param != exc.param else exc.message
        raise bad_request(message, param=param) from None


def check_limits(body: dict, max_tokens: Any, max_tokens_param: str, *, defaulted: bool) -> Any:
    """The server's own caps (settings), on top of what SamplingParams checks: a request may not
    ask for unbounded output or hand the detokenizer huge stop-string scans. Returns max_tokens
    (a default above the cap is lowered to it)."""
    cap = settings.MINIVLLM_MAX_OUTPUT_TOKENS
    over = isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and cap > 0 and max_tokens > cap
    if over and defaulted:
        max_tokens = cap
    elif over:
        raise bad_request(
            f"{max_tokens_param} must be at most {cap}, got {max_tokens}", param=max_tokens_param, code="max_tokens_too_large"
        )
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    most, longest = settings.MINIVLLM_MAX_STOP_STRINGS, settings.MINIVLLM_MAX_STOP_LENGTH
    if len(stops) > most:
        raise bad_request(
            f"at most {most} stop strings are allowed, got {len(stops)}", param="stop", code="too_many_stop_strings"
        )
    for item in stops:
        if isinstance(item, str) and len(item) > longest:
            raise bad_request(
                f"each stop string may have at most {longest} characters", param="stop", code="stop_string_too_long"
            )
    return max_tokens


def max_tokens_field(body: dict, names: tuple[str, ...], default: int | None) -> tuple[int | None, str, bool]:
    """(value, the name the client used, whether it was defaulted); aliases must agree."""
    given = [(name, body[name]) for name in names if name in body]
    if not given:
        return default, names[0], True
    name, value = given[0]
    for other, other_value in given[1:]:
        if other_value != value:
            raise bad_request(f"{name} and {other} disagree; send only one", param=other)
    return value, name, False


def prediction(body: dict) -> str | None:
    """OpenAI's Predicted Outputs, `{"type": "content", "content": text or [text parts]}`: the text
    the reply is expected to mostly repeat (a file being edited). It is guessed from and verified,
    so it changes the reply's speed, never its tokens (engine/spec_decode/proposer.py)."""
    value = body.get("prediction")
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content" or set(value) - {"type", "content"}:
        raise bad_request('prediction must be {"type": "content", "content": ...}', param="prediction")
    content = value.get("content")
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise bad_request("prediction.content must be a string or a list of text parts", param="prediction")
    return content or None
