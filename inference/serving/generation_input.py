"""The request contract between the APIs and the request path: a validated request, whatever API
it came through. api/openai/request.py builds one from an HTTP body; submission.py plans and submits
it; the views render its reply. Nothing here knows HTTP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..engine.sample.sampling_params import SamplingParams


class ReasoningReader(Protocol):
    """How a thinking model's replies to this prompt read (api/reasoning_parsers.ReplyReasoning):
    a finished choice's text is split into its reasoning (None when it has none) and its answer."""

    def split(self, text: str) -> tuple[str | None, str]: ...


class ToolReader(Protocol):
    """A chat request's tools as the request path sees them (api/tool_calls.ToolRequest): when a
    choice ends, its text is read for calls, and the calls go into the history row."""

    def read_calls(self, text: str) -> tuple[str | None, list]: ...


@dataclass
class GenerationInput:
    endpoint: str
    params: SamplingParams  # max_tokens None: the rest of the context, as OpenAI / vLLM (submission.plan)
    # /generate: one; /v1/completions: each gets its own n choices; chat: none (its messages)
    prompts: list[str | list[int]] = field(default_factory=list)
    echo: bool = False
    # echo with max_tokens 0 (scoring clients): the reply is the prompt and its logprobs alone; one
    # token is generated and dropped, as vLLM does
    echo_only: bool = False
    suffix: str | None = None  # /v1/completions' fill-in-the-middle: each prompt is the prefix (api/llama/fim.py)
    messages: list[dict] | None = None
    model: str | None = None
    stream: bool = True
    include_usage: bool = False
    continuous_usage: bool = False  # every chunk carries the usage so far (stream_options.continuous_usage_stats)
    # The sampling fields the client set: the checkpoint's defaults fill the others (submission.plan).
    given: frozenset[str] = frozenset()
    tools: ToolReader | None = None  # chat's tools and tool_choice
    # Chat template arguments the request set: `kwargs` (chat_template_kwargs, reasoning_effort),
    # `template` (a request's own), `add_generation_prompt`, `continue_final` (api/common/chat_template.py)
    template_options: dict = field(default_factory=dict)
    reasoning: ReasoningReader | None = None  # set once the prompt is rendered (api/common/reasoning_parsers.py)
    thinking_budget: int | None = None  # reasoning tokens before the end marker is forced
    prediction: str | None = None  # Predicted Outputs' text: tokenized into params.prediction (submission.plan)
