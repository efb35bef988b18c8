"""Request validation, in one place: an HTTP body in, a typed request with `SamplingParams` out.

Every rejection is an `ApiError` naming the offending field in `param`, so the three APIs
report bad input the same way. Sampling values are checked by `SamplingParams` itself; its
`SamplingParamsError.param` is mapped back to the name the client used (e.g. `max_new_tokens`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig

from ..engine.sampling_params import SamplingParams, SamplingParamsError
from ..serving.generation_input import GenerationInput
from .errors import ApiError, bad_request
from .tool_calls import ToolRequest
from .tool_parsers import HermesToolParser, ToolParser

# Sampling fields passed straight to SamplingParams (vLLM-style extras included).
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
}
# OpenAI fields we accept and ignore: they change nothing about the output.
IGNORED_OPENAI_FIELDS = {"user", "metadata", "store", "service_tier", "parallel_tool_calls"}

# vLLM's extras for constrained decoding, on both OpenAI endpoints (chat also takes response_format)
GUIDED_FIELDS = {"guided_json": "json_schema", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}
# llama-server's names on /generate
GENERATE_GUIDED_FIELDS = {"json_schema": "json_schema", "grammar": "grammar"}
GENERATE_FIELDS = {"prompt", "max_new_tokens", "max_tokens", "logprobs"} | ENGINE_SAMPLING_FIELDS | set(GENERATE_GUIDED_FIELDS)
COMPLETION_FIELDS = (
    {"model", "prompt", "max_tokens", "n", "best_of", "stream", "stream_options", "logprobs", "echo", "suffix", "logit_bias"}
    | {"prompt_logprobs"}
    | set(GUIDED_FIELDS)
    | ENGINE_SAMPLING_FIELDS
    | IGNORED_OPENAI_FIELDS
)
CHAT_FIELDS = (
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "stream",
        "stream_options",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "prompt_logprobs",
        *GUIDED_FIELDS,
        "response_format",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
    }
    | ENGINE_SAMPLING_FIELDS
    | IGNORED_OPENAI_FIELDS
)
CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


# ---- the body -------------------------------------------------------------------------------


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(request) -> dict:
    """The body as a JSON object, or 413/415/400 with a message saying what is wrong."""
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        raise ApiError(
            415,
            f"Content-Type must be application/json, got {content_type!r} (curl: add -H 'Content-Type: application/json')",
            code="unsupported_media_type",
        )
    try:
        raw = request.body
    except RequestDataTooBig:
        raw = None
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if raw is None or (limit is not None and len(raw) > limit):  # a chunked body has no Content-Length
        raise ApiError(413, f"request body is too large (limit {limit} bytes)", code="request_too_large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"request body is not valid UTF-8 (byte {exc.start})", code="invalid_body") from None
    if not text.strip():
        raise bad_request("request body is empty; send a JSON object", code="invalid_body")
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request(f"request body must be a JSON object, got {type(body).__name__}", code="invalid_body")
    _check_unicode(body, "")
    return body


def _check_unicode(value: Any, path: str) -> None:
    """JSON may escape half a surrogate pair ("\\ud800"); such a string is no Unicode text: it cannot
    be encoded, tokenized or stored, so it is refused here, naming the field, on every endpoint."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise bad_request(
                f"{path or 'a key'} holds an unpaired surrogate (U+{ord(value[exc.start]):04X}), which is not valid Unicode",
                param=path or None,
                code="invalid_unicode",
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode(key, path)
            _check_unicode(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_unicode(item, f"{path}[{index}]")


# ---- shared field checks ----------------------------------------------------------------------


def _without_nulls(body: dict) -> dict:
    """An explicit null means "use the default", as OpenAI clients assume."""
    return {key: value for key, value in body.items() if value is not None}


def check_unknown_fields(body: dict, allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad_request(f"unrecognized request argument supplied: {unknown[0]}", param=unknown[0], code="unknown_field")


def _expect(body: dict, name: str, kind: type | tuple, what: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise bad_request(f"{name} must be {what}, got a boolean", param=name)
    if not isinstance(value, kind):
        raise bad_request(f"{name} must be {what}, got {type(value).__name__}", param=name)
    return value


def _stream_flags(body: dict, *, default_stream: bool) -> tuple[bool, bool]:
    stream = _expect(body, "stream", bool, "a boolean")
    stream = default_stream if stream is None else stream
    options = _expect(body, "stream_options", dict, "an object")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad_request("stream_options is only allowed when stream is true", param="stream_options")
        unknown = set(options) - {"include_usage", "continuous_usage_stats"}
        if unknown:
            raise bad_request(f"unknown stream_options field: {sorted(unknown)[0]}", param="stream_options")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise bad_request("stream_options.include_usage must be a boolean", param="stream_options.include_usage")
    return stream, include_usage


def _n(body: dict) -> int:
    """n, and best_of only where it equals n (vLLM V1 dropped best_of > n: it is refused)."""
    n = _expect(body, "n", int, "an integer")
    n = 1 if n is None else n
    if not 1 <= n <= SamplingParams.MAX_N:
        raise bad_request(f"n must be in [1, {SamplingParams.MAX_N}], got {n}", param="n")
    best_of = _expect(body, "best_of", int, "an integer")
    if best_of is not None and best_of != n:
        raise bad_request(f"best_of must equal n ({n}): a best_of above n is not supported", param="best_of")
    return n


def _logit_bias(body: dict) -> dict[int, float]:
    """OpenAI's {"token id": bias}, bias in [-100, 100]; the ids are checked against the vocabulary on submit."""
    bias = _expect(body, "logit_bias", dict, "an object mapping token ids to numbers")
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


def _reject_unsupported(body: dict) -> None:
    """OpenAI features this server does not implement: refuse rather than silently ignore."""
    if _expect(body, "suffix", str, "a string"):
        raise bad_request("suffix is not supported", param="suffix")
    if body.get("functions") or body.get("function_call") not in (None, "none"):
        raise bad_request("the legacy functions / function_call fields are not supported: use tools", param="functions")


def _structured(body: dict, fields: dict[str, str]) -> dict | None:
    """The one constraint a request asks for (engine/structured.py), from response_format (chat)
    or a guided_* / json_schema / grammar field; its grammar is compiled before it is queued."""
    specs = []
    response_format = _expect(body, "response_format", dict, "an object")
    if response_format is not None:
        kind = response_format.get("type", "text")
        if kind == "json_object":
            specs.append({"kind": "json_object", "value": None, "param": "response_format"})
        elif kind == "json_schema":
            inner = response_format.get("json_schema")
            schema = inner.get("schema") if isinstance(inner, dict) else None
            if not isinstance(schema, dict):
                raise bad_request("response_format.json_schema.schema must be a JSON schema object", param="response_format")
            specs.append({"kind": "json_schema", "value": schema, "param": "response_format"})
        elif kind != "text":
            raise bad_request(
                f"response_format type must be text, json_object or json_schema, got {kind!r}", param="response_format"
            )
    for name, kind in fields.items():
        if name not in body:
            continue
        value = body[name]
        if kind == "json_schema":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    raise bad_request(f"{name} must be a JSON schema (an object, or a string holding one)", param=name) from None
            if not isinstance(value, dict):
                raise bad_request(f"{name} must be a JSON schema object", param=name)
        elif kind == "choice":
            if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
                raise bad_request(f"{name} must be a non-empty list of non-empty strings", param=name)
        elif not isinstance(value, str) or not value:
            raise bad_request(f"{name} must be a non-empty string", param=name)
        specs.append({"kind": kind, "value": value, "param": name})
    if len(specs) > 1:
        raise bad_request(f"only one constraint per request, got {', '.join(s['param'] for s in specs)}", param=specs[1]["param"])
    return specs[0] if specs else None


def _tools(body: dict, parser: ToolParser) -> ToolRequest | None:
    """tools, tool_choice and parallel_tool_calls, as OpenAI defines them."""
    tools = _expect(body, "tools", list, "a list of tools")
    choice = body.get("tool_choice", "auto" if tools else "none")
    parallel = _expect(body, "parallel_tool_calls", bool, "a boolean")
    if not tools:
        if choice not in ("none", "auto"):
            raise bad_request("tool_choice needs tools", param="tool_choice")
        return None
    names = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise bad_request("each tool must be {type: function, function: {name, parameters}}", param=f"tools[{index}]")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise bad_request("a function's parameters must be a JSON schema object", param=f"tools[{index}].function.parameters")
        names.append(name)
    if isinstance(choice, dict):
        named = choice.get("function", {}).get("name") if isinstance(choice.get("function"), dict) else None
        if choice.get("type") != "function" or named not in names:
            raise bad_request("tool_choice must name one of the tools", param="tool_choice")
    elif choice not in ("none", "auto", "required"):
        raise bad_request("tool_choice must be none, auto, required or {type: function, function: {name}}", param="tool_choice")
    return ToolRequest(
        [{"type": "function", "function": t["function"]} for t in tools],
        choice,
        True if parallel is None else parallel,
        parser,
    )


def _model(body: dict) -> str | None:
    return _expect(body, "model", str, "a string")


def _sampling_params(body: dict, *, max_tokens: int, max_tokens_param: str, logprobs: int | None, **extra) -> SamplingParams:
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


def _check_limits(body: dict, max_tokens: Any, max_tokens_param: str, *, defaulted: bool) -> Any:
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


def _max_tokens(body: dict, names: tuple[str, ...], default: int | None) -> tuple[int | None, str, bool]:
    """(value, the name the client used, whether it was defaulted); aliases must agree."""
    given = [(name, body[name]) for name in names if name in body]
    if not given:
        return default, names[0], True
    name, value = given[0]
    for other, other_value in given[1:]:
        if other_value != value:
            raise bad_request(f"{name} and {other} disagree; send only one", param=other)
    return value, name, False


def _prompt_text(value: Any, param: str = "prompt") -> str:
    if not isinstance(value, str):
        raise bad_request(f"{param} must be a string, got {type(value).__name__}", param=param)
    if not value:
        raise bad_request(f"{param} must not be empty", param=param)
    return value


# ---- the three APIs ---------------------------------------------------------------------------


def parse_generate(body: dict, *, default_max_tokens: int) -> GenerationInput:
    """The seed's /generate: {"prompt", "max_new_tokens", "temperature", "top_p", ...}."""
    body = _without_nulls(body)
    check_unknown_fields(body, GENERATE_FIELDS)
    if "prompt" not in body:
        raise bad_request("prompt is required", param="prompt")
    prompt = _prompt_text(body["prompt"])
    max_tokens, max_name, defaulted = _max_tokens(body, ("max_new_tokens", "max_tokens"), default_max_tokens)
    max_tokens = _check_limits(body, max_tokens, max_name, defaulted=defaulted)
    logprobs = body.get("logprobs")
    params = _sampling_params(
        body,
        max_tokens=max_tokens,
        max_tokens_param=max_name,
        logprobs=logprobs,
        structured=_structured(body, GENERATE_GUIDED_FIELDS),
    )
    return GenerationInput(endpoint="generate", params=params, prompts=[prompt], stream=True, given=frozenset(body))


MAX_PROMPTS = 32  # prompts in one /v1/completions request


def _completion_prompts(value: Any) -> list[str | list[int]]:
    """A string, token ids, or a list of either (a batch: one set of choices per prompt)."""
    if isinstance(value, str):
        return [_prompt_text(value)]
    if not isinstance(value, list):
        raise bad_request(f"prompt must be a string or a list of token ids, got {type(value).__name__}", param="prompt")
    if not value:
        raise bad_request("prompt must not be empty", param="prompt")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return [_token_ids(value, "prompt")]
    if not all(isinstance(p, (str, list)) for p in value):
        raise bad_request("prompt must be a string, token ids, or a list of strings or of token id lists", param="prompt")
    if len(value) > MAX_PROMPTS:
        raise bad_request(f"at most {MAX_PROMPTS} prompts per request, got {len(value)}", param="prompt")
    return [_prompt_text(p, f"prompt[{i}]") if isinstance(p, str) else _token_ids(p, f"prompt[{i}]") for i, p in enumerate(value)]


def _token_ids(value: list, param: str) -> list[int]:
    if not value:
        raise bad_request(f"{param} must not be empty", param=param)
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        raise bad_request(f"{param} must be a string or a list of token ids (integers >= 0)", param=param)
    return list(value)


def parse_completion(body: dict) -> GenerationInput:
    """OpenAI's /v1/completions (plus vLLM's extra sampling fields)."""
    body = _without_nulls(body)
    check_unknown_fields(body, COMPLETION_FIELDS)
    _reject_unsupported(body)
    if "prompt" not in body:
        raise bad_request("prompt is required", param="prompt")
    prompts = _completion_prompts(body["prompt"])
    stream, include_usage = _stream_flags(body, default_stream=False)
    max_tokens, max_name, defaulted = _max_tokens(body, ("max_tokens",), COMPLETIONS_DEFAULT_MAX_TOKENS)
    max_tokens = _check_limits(body, max_tokens, max_name, defaulted=defaulted)
    echo = bool(_expect(body, "echo", bool, "a boolean"))
    logprobs = body.get("logprobs")
    prompt_logprobs = body.get("prompt_logprobs")
    if echo and logprobs is not None and prompt_logprobs is None:
        prompt_logprobs = logprobs  # echo with logprobs lists the prompt's too, from the prefill that runs anyway
    params = _sampling_params(
        body,
        max_tokens=max_tokens,
        max_tokens_param=max_name,
        logprobs=logprobs,
        n=_n(body),
        logit_bias=_logit_bias(body),
        prompt_logprobs=prompt_logprobs,
        structured=_structured(body, GUIDED_FIELDS),
    )
    return GenerationInput(
        endpoint="completions",
        params=params,
        prompts=prompts,
        echo=echo,
        given=frozenset(body),
        model=_model(body),
        stream=stream,
        include_usage=include_usage,
    )


def _message_content(content: Any, index: int) -> str:
    param = f"messages[{index}].content"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request("only text content parts are supported", param=param)
            parts.append(part["text"])
        return "".join(parts)
    raise bad_request(f"{param} must be a string or a list of text parts", param=param)


def _tool_calls_text(calls: Any, index: int, parser: ToolParser) -> str:
    param = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise bad_request(f"{param} must be a list", param=param)
    parsed_calls = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"{param}: each call needs function.name and function.arguments", param=param)
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            raise bad_request(f"{param}: function.arguments must be a JSON object string", param=param) from None
        if not isinstance(parsed, dict):
            raise bad_request(f"{param}: function.arguments must be a JSON object string", param=param)
        parsed_calls.append((function["name"], parsed))
    return parser.calls_text(parsed_calls)


def parse_messages(value: Any, tool_parser: ToolParser | None = None) -> list[dict]:
    """Chat messages, normalised to [{"role", "content": str}] for the chat template; an assistant
    turn's tool_calls become its content, written in the served model's call format."""
    if not isinstance(value, list) or not value:
        raise bad_request("messages must be a non-empty list", param="messages")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise bad_request(f"messages[{index}] must be an object", param=f"messages[{index}]")
        role = message.get("role")
        if not isinstance(role, str) or role not in CHAT_ROLES:  # a list or object is not hashable
            raise bad_request(
                f"messages[{index}].role must be one of {', '.join(sorted(CHAT_ROLES))}, got {role!r}",
                param=f"messages[{index}].role",
            )
        if "content" not in message and role != "assistant":
            raise bad_request(f"messages[{index}].content is required", param=f"messages[{index}].content")
        content = _message_content(message.get("content"), index)
        if message.get("tool_calls"):  # an earlier turn's calls, written back as the model wrote them
            calls = _tool_calls_text(message["tool_calls"], index, tool_parser or HermesToolParser())
            content = (content + "\n" if content else "") + calls
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    return messages


def parse_chat(body: dict, tool_parser: ToolParser | None = None) -> GenerationInput:
    """OpenAI's /v1/chat/completions (plus vLLM's extra sampling fields); tools are read, written and
    forced in `tool_parser`'s format (the served model's: api/tool_parsers.py)."""
    tool_parser = tool_parser or HermesToolParser()
    body = _without_nulls(body)
    check_unknown_fields(body, CHAT_FIELDS)
    _reject_unsupported(body)
    if "messages" not in body:
        raise bad_request("messages is required", param="messages")
    messages = parse_messages(body["messages"], tool_parser)
    tools = _tools(body, tool_parser)
    structured = _structured(body, GUIDED_FIELDS)
    try:
        grammar = tools.grammar() if tools is not None else None
    except RecursionError:
        raise bad_request("a function's parameters are nested too deeply", param="tools") from None
    if grammar is not None:  # required / named: the call's shape is forced
        if structured is not None:
            raise bad_request("tool_choice required or named cannot be combined with another constraint", param="tool_choice")
        structured = {"kind": "lark", "value": grammar, "param": "tool_choice"}
    stream, include_usage = _stream_flags(body, default_stream=False)
    # Left out: None, the rest of the context, computed and capped when submitted (submission.plan).
    max_tokens, max_name, defaulted = _max_tokens(body, ("max_completion_tokens", "max_tokens"), None)
    if not defaulted:
        max_tokens = _check_limits(body, max_tokens, max_name, defaulted=False)
    else:
        _check_limits(body, None, max_name, defaulted=True)
    want_logprobs = _expect(body, "logprobs", bool, "a boolean")
    top_logprobs = _expect(body, "top_logprobs", int, "an integer")
    if top_logprobs is not None and not want_logprobs:
        raise bad_request("top_logprobs requires logprobs to be true", param="top_logprobs")
    logprobs = (top_logprobs or 0) if want_logprobs else None
    try:
        params = _sampling_params(
            body,
            max_tokens=max_tokens,
            max_tokens_param=max_name,
            logprobs=logprobs,
            n=_n(body),
            logit_bias=_logit_bias(body),
            prompt_logprobs=body.get("prompt_logprobs"),
            structured=structured,
        )
    except ApiError as exc:
        if exc.param == "logprobs" and top_logprobs is not None:
            exc.param = "top_logprobs"
            exc.message = exc.message.replace("logprobs", "top_logprobs")
        raise
    return GenerationInput(
        endpoint="chat.completions",
        params=params,
        messages=messages,
        model=_model(body),
        stream=stream,
        include_usage=include_usage,
        given=frozenset(body),
        tools=tools,
    )
