"""The three APIs' requests: an HTTP body in, a GenerationInput (serving/generation_input.py) out.

Every rejection is an `ApiError` naming the offending field in `param`, so the three APIs report
bad input the same way. The checks live by concern: the body (common/request_body.py), the shared
sampling fields (common/sampling_fields.py), chat messages (common/chat_messages.py), tools (common/tool_calls.py)
and structured-output specs (common/structured_fields.py); this module says which fields each API
takes and puts them together.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from ...serving.generation_input import GenerationInput
from ..common.chat_messages import parse_messages
from ..common.errors import ApiError, bad_request
from ..common.extra_fields import drop_ignored
from ..common.sampling_fields import (
    ENGINE_SAMPLING_FIELDS,
    check_limits,
    check_unknown_fields,
    choices_n,
    expect,
    logit_bias,
    max_tokens_field,
    model_name,
    prediction,
    reject_unsupported,
    sampling_params,
    stream_flags,
    with_aliases,
    without_nulls,
)
from ..common.structured_fields import GENERATE_GUIDED_FIELDS, GUIDED_FIELDS, structured_spec
from ..common.tool_calls import tool_trigger, tools_from_body
from ..common.tool_parsers import HermesToolParser, ToolParser

# (`model` and `keep_alive`: which model of several, and how long it stays loaded once idle)
GENERATE_FIELDS = (
    {"model", "keep_alive", "prompt", "max_new_tokens", "max_tokens", "logprobs"}
    | ENGINE_SAMPLING_FIELDS
    | set(GENERATE_GUIDED_FIELDS)
)
# vLLM's and OpenAI's fields that both OpenAI endpoints read
COMMON_FIELDS = {
    "structured_outputs",
    "response_format",
    "use_beam_search",
    "keep_alive",
}  # keep_alive: Ollama's, read by the views
COMPLETION_FIELDS = (
    {
        "model",
        "prompt",
        "max_tokens",
        "n",
        "best_of",
        "stream",
        "stream_options",
        "logprobs",
        "echo",
        "suffix",
        "logit_bias",
        "prediction",
    }
    | {"prompt_logprobs"}
    | COMMON_FIELDS
    | set(GUIDED_FIELDS)
    | ENGINE_SAMPLING_FIELDS
)
CHAT_FIELDS = (
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "prediction",
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
        "parallel_tool_calls",
        "functions",
        "function_call",
        "reasoning_effort",
        "thinking_token_budget",
        "chat_template_kwargs",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "modalities",
        "audio",
    }
    | COMMON_FIELDS
    | ENGINE_SAMPLING_FIELDS
)
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _openai_body(body: dict, allowed: set[str]) -> dict:
    """Nulls dropped, llama-server's aliases read, ignored fields dropped (common/extra_fields.py), then
    any name no reference documents refused; and what no model here can do refused by name."""
    body = drop_ignored(with_aliases(without_nulls(body)), allowed)
    check_unknown_fields(body, allowed)
    if expect(body, "use_beam_search", bool, "a boolean"):
        raise bad_request("beam search is not supported", param="use_beam_search")
    return body


def thinking_budget(body: dict, name: str) -> int | None:
    """A reasoning budget in tokens (vLLM's thinking_token_budget), >= 1."""
    budget = expect(body, name, int, "an integer")
    if budget is not None and budget < 1:
        raise bad_request(f"{name} must be >= 1, got {budget}", param=name)
    return budget


def template_options(body: dict) -> dict:
    """The chat template's arguments a request sets (vLLM's names; reasoning_effort as vLLM passes it)."""
    options = {}
    kwargs = dict(expect(body, "chat_template_kwargs", dict, "an object") or {})
    effort = expect(body, "reasoning_effort", str, "a string")
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            raise bad_request(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}", param="reasoning_effort")
        kwargs.setdefault("reasoning_effort", effort)
        if effort == "none":  # no reasoning: templates with a thinking switch turn it off
            kwargs.setdefault("enable_thinking", False)
    reserved = {"messages", "tools", "add_generation_prompt", "continue_final_message", "tokenize", "chat_template"} & set(kwargs)
    if reserved:
        raise bad_request(f"chat_template_kwargs may not set {sorted(reserved)[0]}", param="chat_template_kwargs")
    if kwargs:
        options["kwargs"] = kwargs
    template = expect(body, "chat_template", str, "a string")
    if template is not None:
        if not settings.MINIVLLM_TRUST_REQUEST_CHAT_TEMPLATE:
            raise bad_request(
                "a request's own chat_template is refused unless the server sets MINIVLLM_TRUST_REQUEST_CHAT_TEMPLATE=1",
                param="chat_template",
            )
        options["template"] = template
    add = expect(body, "add_generation_prompt", bool, "a boolean")
    if add is not None:
        options["add_generation_prompt"] = add
    if expect(body, "continue_final_message", bool, "a boolean"):
        if add:
            raise bad_request(
                "continue_final_message cannot be combined with add_generation_prompt", param="continue_final_message"
            )
        options["continue_final"] = True
    modalities = expect(body, "modalities", list, "a list")
    if modalities is not None and any(m != "text" for m in modalities):
        raise bad_request("only the text modality is supported", param="modalities")
    if "audio" in body:
        raise bad_request("audio output is not supported", param="audio")
    return options


def _prompt_text(value: Any, param: str = "prompt") -> str:
    if not isinstance(value, str):
        raise bad_request(f"{param} must be a string, got {type(value).__name__}", param=param)
    if not value:
        raise bad_request(f"{param} must not be empty", param=param)
    return value


# ---- the three APIs ---------------------------------------------------------------------------


def parse_generate(body: dict, *, default_max_tokens: int) -> GenerationInput:
    """The seed's /generate: {"prompt", "max_new_tokens", "temperature", "top_p", ...}."""
    body = with_aliases(without_nulls(body))
    check_unknown_fields(body, GENERATE_FIELDS)
    if "prompt" not in body:
        raise bad_request("prompt is required", param="prompt")
    prompt = _prompt_text(body["prompt"])
    max_tokens, max_name, defaulted = max_tokens_field(body, ("max_new_tokens", "max_tokens"), default_max_tokens)
    max_tokens = check_limits(body, max_tokens, max_name, defaulted=defaulted)
    logprobs = body.get("logprobs")
    params = sampling_params(
        body,
        max_tokens=max_tokens,
        max_tokens_param=max_name,
        logprobs=logprobs,
        structured=structured_spec(body, GENERATE_GUIDED_FIELDS),
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


def parse_completion(body: dict, *, default_max_tokens: int | None = COMPLETIONS_DEFAULT_MAX_TOKENS) -> GenerationInput:
    """OpenAI's /v1/completions (plus vLLM's extra sampling fields); `default_max_tokens`: OpenAI's
    16 unless the API says otherwise (None: the rest of the context, as Ollama's generate)."""
    body = _openai_body(body, COMPLETION_FIELDS)
    reject_unsupported(body)
    if "prompt" not in body:
        raise bad_request("prompt is required", param="prompt")
    prompts = _completion_prompts(body["prompt"])
    stream, include_usage, continuous_usage = stream_flags(body, default_stream=False)
    max_tokens, max_name, defaulted = max_tokens_field(body, ("max_tokens",), default_max_tokens)
    max_tokens = check_limits(body, max_tokens, max_name, defaulted=defaulted)
    echo = bool(expect(body, "echo", bool, "a boolean"))
    suffix = expect(body, "suffix", str, "a string")
    if suffix is not None:
        if echo:
            raise bad_request("echo cannot be combined with suffix", param="echo")
        if not all(isinstance(p, str) for p in prompts):
            raise bad_request("with suffix, each prompt must be text (the code before the gap)", param="prompt")
    echo_only = echo and max_tokens == 0 and not isinstance(max_tokens, bool)
    if echo_only:
        max_tokens = 1
    logprobs = body.get("logprobs")
    prompt_logprobs = body.get("prompt_logprobs")
    if echo and logprobs is not None and prompt_logprobs is None:
        prompt_logprobs = logprobs  # echo with logprobs lists the prompt's too, from the prefill that runs anyway
    params = sampling_params(
        body,
        max_tokens=max_tokens,
        max_tokens_param=max_name,
        logprobs=logprobs,
        n=choices_n(body),
        logit_bias=logit_bias(body),
        prompt_logprobs=prompt_logprobs,
        structured=structured_spec(body, GUIDED_FIELDS),
    )
    return GenerationInput(
        endpoint="completions",
        params=params,
        prompts=prompts,
        echo=echo,
        echo_only=echo_only,
        suffix=suffix,
        prediction=prediction(body),
        given=frozenset(body),
        model=model_name(body),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
    )


def parse_chat(body: dict, tool_parser: ToolParser | None = None) -> GenerationInput:
    """OpenAI's /v1/chat/completions (plus vLLM's extra sampling fields); tools are read, written and
    forced in `tool_parser`'s format (the served model's: api/common/tool_parsers.py)."""
    tool_parser = tool_parser or HermesToolParser()
    body = _openai_body(body, CHAT_FIELDS)
    reject_unsupported(body)
    if "messages" not in body:
        raise bad_request("messages is required", param="messages")
    messages = parse_messages(body["messages"])
    tools = tools_from_body(body, tool_parser)
    structured = structured_spec(body, GUIDED_FIELDS)
    try:
        grammar = tools.grammar() if tools is not None else None
    except RecursionError:
        raise bad_request("a function's parameters are nested too deeply", param="tools") from None
    if grammar is not None:  # required / named: the call's shape is forced
        if structured is not None:
            raise bad_request("tool_choice required or named cannot be combined with another constraint", param="tool_choice")
        structured = {"kind": "lark", "value": grammar, "param": "tool_choice"}
    stream, include_usage, continuous_usage = stream_flags(body, default_stream=False)
    # Left out: None, the rest of the context, computed and capped when submitted (submission.plan).
    max_tokens, max_name, defaulted = max_tokens_field(body, ("max_completion_tokens", "max_tokens"), None)
    if not defaulted:
        max_tokens = check_limits(body, max_tokens, max_name, defaulted=False)
    else:
        check_limits(body, None, max_name, defaulted=True)
    want_logprobs = expect(body, "logprobs", bool, "a boolean")
    top_logprobs = expect(body, "top_logprobs", int, "an integer")
    if top_logprobs is not None and not want_logprobs:
        raise bad_request("top_logprobs requires logprobs to be true", param="top_logprobs")
    logprobs = (top_logprobs or 0) if want_logprobs else None
    try:
        params = sampling_params(
            body,
            max_tokens=max_tokens,
            max_tokens_param=max_name,
            logprobs=logprobs,
            n=choices_n(body),
            logit_bias=logit_bias(body),
            prompt_logprobs=body.get("prompt_logprobs"),
            structured=structured,
            tool_trigger=tool_trigger(tools, structured),
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
        model=model_name(body),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        given=frozenset(body),
        tools=tools,
        template_options=template_options(body),
        thinking_budget=thinking_budget(body, "thinking_token_budget"),
        prediction=prediction(body),
    )
