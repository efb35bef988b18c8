"""Per-request sampling parameters and their validation.

Validation lives here, in one place, so the engine, the HTTP layer and the CLI all
reject bad input with the same message naming the offending parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


class SamplingParamsError(ValueError):
    """An invalid sampling parameter; `param` names it for API error bodies."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


@dataclass
class SamplingParams:
    max_tokens: int | None = 16  # None: until the context is full (chat without max_tokens)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1 disables top-k
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top alternatives to return per token
    n: int = 1  # completions of the one prompt (they share its KV blocks)
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit
    include_stop_str_in_output: bool = False  # a matched stop string ends the text instead of being cut
    prompt_logprobs: int | None = None  # the prompt's tokens' logprobs (and this many alternatives each)
    # constrained decoding: {"kind": json_schema | json_object | regex | choice | grammar, "value", "param"}
    structured: dict | None = None
    # a thinking model's reply that starts in reasoning: {"end": marker text, "budget": tokens or None}
    # (engine/sample/reasoning.py): grammars apply after the marker; a spent budget forces it
    reasoning: dict | None = None
    # an embedding request: its prompt is computed and pooled ("last" | "mean"), nothing is sampled
    pooling: str | None = None
    # OpenAI's Predicted Outputs: token ids the reply is expected to mostly repeat, guessed from
    # first and verified like any speculation (engine/spec_decode/proposer.py)
    prediction: list[int] | None = None
    # tool_choice "auto" with tools: the reply is free until it opens a call, then constrained
    # (engine/sample/tool_trigger.py): {"grammar": a lark spec as `structured`, "calls": the same
    # without its other-JSON alternatives, "tags": the texts that open a call anywhere, "bare":
    # whether a `{` or a ```json fence opening the answer may}
    tool_trigger: dict | None = None
    # vLLM's cache_salt: the prompt's cached blocks are shared only with requests of the same salt
    # (engine/kv_cache/block_pool.py chain_root)
    cache_salt: str | None = None

    MAX_LOGPROBS = 20
    MAX_N = 16

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.validate()

    def validate(self) -> None:
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, low=1)
        _check_int("min_tokens", self.min_tokens, low=0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise SamplingParamsError(
                "min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})"
            )
        _check_float("temperature", self.temperature, low=0.0, high=100.0)
        _check_float("top_p", self.top_p, low=0.0, high=1.0, low_open=True)
        _check_int("top_k", self.top_k, low=-1)
        _check_float("min_p", self.min_p, low=0.0, high=1.0)
        _check_float("repetition_penalty", self.repetition_penalty, low=0.0, high=100.0, low_open=True)
        _check_float("presence_penalty", self.presence_penalty, low=-2.0, high=2.0)
        _check_float("frequency_penalty", self.frequency_penalty, low=-2.0, high=2.0)
        if self.seed is not None:
            _check_int("seed", self.seed, low=-(2**63), high=2**63 - 1)
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise SamplingParamsError("stop", "stop must be a non-empty string or a list of non-empty strings")
        if not isinstance(self.stop_token_ids, list):
            raise SamplingParamsError("stop_token_ids", "stop_token_ids must be a list of integers")
        for token_id in self.stop_token_ids:
            _check_int("stop_token_ids", token_id, low=0)
        if self.cache_salt is not None and (not isinstance(self.cache_salt, str) or not self.cache_salt):
            raise SamplingParamsError("cache_salt", "cache_salt must be a non-empty string")
        if not isinstance(self.ignore_eos, bool):
            raise SamplingParamsError("ignore_eos", "ignore_eos must be a boolean")
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, low=0, high=self.MAX_LOGPROBS)
        if self.prompt_logprobs is not None:
            _check_int("prompt_logprobs", self.prompt_logprobs, low=0, high=self.MAX_LOGPROBS)
        _check_int("n", self.n, low=1, high=self.MAX_N)
        if self.structured is not None and (
            not isinstance(self.structured, dict)
            or self.structured.get("kind") not in ("json_schema", "json_object", "regex", "choice", "grammar", "lark")
        ):
            raise SamplingParamsError(
                "structured", "structured must name a kind: json_schema, json_object, regex, choice, grammar"
            )
        if self.tool_trigger is not None:
            _check_tool_trigger(self.tool_trigger)
        if self.pooling is not None and (self.pooling not in ("last", "mean", "cls") or self.n != 1):
            raise SamplingParamsError("pooling", "pooling must be last, mean or cls, with n 1")
        if self.reasoning is not None:
            if (
                not isinstance(self.reasoning, dict)
                or not isinstance(self.reasoning.get("end"), str)
                or not self.reasoning["end"]
            ):
                raise SamplingParamsError("reasoning", "reasoning must name its end marker")
            if self.reasoning.get("budget") is not None:
                _check_int("thinking_token_budget", self.reasoning["budget"], low=1)
        if self.prediction is not None:
            if not isinstance(self.prediction, list):
                raise SamplingParamsError("prediction", "prediction must be a list of token ids")
            for token_id in self.prediction:
                _check_int("prediction", token_id, low=0)
        if not isinstance(self.include_stop_str_in_output, bool):
            raise SamplingParamsError("include_stop_str_in_output", "include_stop_str_in_output must be a boolean")
        if not isinstance(self.logit_bias, dict):
            raise SamplingParamsError("logit_bias", "logit_bias must map token ids to numbers")
        for token_id, bias in self.logit_bias.items():
            _check_int("logit_bias", token_id, low=0)
            _check_float("logit_bias", bias, low=-100.0, high=100.0)

    def child(self, index: int) -> SamplingParams:
        """The parameters of completion `index` of n: its own seed (seed + index) when one is given."""
        if index == 0 or self.seed is None:
            return self
        return replace(self, seed=(self.seed + index + 2**63) % 2**64 - 2**63)  # kept in the signed 64-bit range


def _check_tool_trigger(trigger) -> None:
    grammar = trigger.get("grammar") if isinstance(trigger, dict) else None
    calls = (trigger.get("calls") or grammar) if isinstance(trigger, dict) else None
    tags = trigger.get("tags", []) if isinstance(trigger, dict) else None
    if (
        not all(isinstance(g, dict) and g.get("kind") == "lark" and isinstance(g.get("value"), str) for g in (grammar, calls))
        or not isinstance(tags, list)
        or not all(isinstance(tag, str) and tag for tag in tags)
        or not isinstance(trigger.get("bare", False), bool)
    ):
        raise SamplingParamsError(
            "tool_trigger", "tool_trigger must hold a lark grammar, its tags and whether bare calls open it"
        )


def _check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SamplingParamsError(name, f"{name} must be an integer, got {type(value).__name__}")
    if low is not None and value < low:
        raise SamplingParamsError(name, f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise SamplingParamsError(name, f"{name} must be <= {high}, got {value}")


def _check_float(name: str, value, *, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SamplingParamsError(name, f"{name} must be a number, got {type(value).__name__}")
    if value != value:  # NaN
        raise SamplingParamsError(name, f"{name} must be a number, got NaN")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        bracket = "(" if low_open else "["
        raise SamplingParamsError(name, f"{name} must be in {bracket}{low}, {high}], got {value}")
