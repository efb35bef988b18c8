"""A request's way into the engine, in one pass: tokenized once, checked once, submitted, recorded.

The prompt is tokenized with the engine's own rule (engine/prompt.py) against `model_info`, so
the count checked here is the count the engine holds, and off the event loop. Chat without max_tokens gets the rest of
the context, computed from the same figures before submitting. The history row is written here
for a request the engine accepts and for a valid one it refuses (no room, a full queue).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from django.conf import settings

from .. import services
from ..engine.engine_state import ModelInfo
from ..engine.errors import PromptTooLongError, QueueFullError
from ..engine.prompt import check_request, prompt_token_ids
from ..engine.sample.sampling_params import SamplingParams
from ..engine.sample.structured import GrammarError
from ..models import GenerationRequest
from .engine_client import EngineClient
from .generation_input import GenerationInput, ReasoningReader, ToolReader
from .instruments import API_REQUESTS, GRAMMAR_COMPILE_TIME, STRUCTURED_REQUESTS
from .jobs import GenerationJob

log = logging.getLogger("inference.serving.submission")


class PromptLimitError(ValueError):
    """The prompt is over MINIVLLM_MAX_PROMPT_TOKENS, the server's own cap below the context."""

    def __init__(self, prompt_tokens: int, limit: int):
        self.prompt_tokens, self.limit = prompt_tokens, limit
        super().__init__(f"the prompt has {prompt_tokens} tokens; at most {limit} are allowed")


# Refusals of a request that was valid: recorded as `rejected` rows.
REFUSALS = (QueueFullError, PromptTooLongError, PromptLimitError)


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """The history row's fields known at submission."""

    request_id: str
    endpoint: str
    model: str
    client_address: str
    stream: bool
    prompt: str
    messages: list | None
    caller: object = None
    extras: dict = dataclasses.field(default_factory=dict)  # request fields kept with the sampling params (tools)
    tools: ToolReader | None = None  # when the reply may hold tool calls
    reasoning: ReasoningReader | None = None  # when the reply may start with reasoning

    def fields(self, params: SamplingParams) -> dict:
        return dict(
            request_id=self.request_id,
            endpoint=self.endpoint,
            model=self.model,
            client_address=self.client_address,
            stream=self.stream,
            prompt=self.prompt,
            messages=self.messages,
            sampling_params={**dataclasses.asdict(params), **self.extras},
            **services.key_fields(self.caller),
        )


def plan(info: ModelInfo, prompt: str | list[int], inp: GenerationInput) -> tuple[list[int], SamplingParams]:
    """The prompt's token ids and the parameters to submit, or the refusal (PromptLimitError,
    PromptTooLongError, SamplingParamsError)."""
    token_ids = prompt_token_ids(info.tokenizer, prompt)
    cap = settings.MINIVLLM_MAX_PROMPT_TOKENS
    if cap > 0 and len(token_ids) > cap:
        raise PromptLimitError(len(token_ids), cap)
    params, limit = inp.params, info.token_limit
    defaults = {name: value for name, value in info.sampling_defaults.items() if name not in inp.given}
    if defaults:  # the checkpoint's generation_config, for what the request left out
        params = dataclasses.replace(params, **defaults)
    if params.max_tokens is None and limit is not None:  # chat without max_tokens: the rest of the context
        room, needed = limit - len(token_ids), max(1, params.min_tokens)
        if room < needed:
            raise PromptTooLongError(len(token_ids), needed, limit)
        output_cap = settings.MINIVLLM_MAX_OUTPUT_TOKENS
        params = dataclasses.replace(params, max_tokens=min(room, output_cap) if output_cap > 0 else room)
    if inp.prediction:  # guesses for the reply: its text's tokens as they would follow the prompt
        params = dataclasses.replace(params, prediction=info.tokenizer.encode(inp.prediction, add_special_tokens=False))
    check_request(token_ids, params, vocab_size=info.vocab_size, limit=limit, num_slots=info.num_slots)
    return token_ids, params


async def with_tool_trigger_compiled(engine_client: EngineClient, inp: GenerationInput) -> GenerationInput:
    """The request with its tool-call trigger's grammar compiled (and cached) off the event loop,
    or without the trigger where it does not compile: the reply then stays free, as with
    MINIVLLM_TOOL_CALL_GRAMMAR off, instead of the request failing."""
    try:
        for spec in (inp.params.tool_trigger["grammar"], inp.params.tool_trigger.get("calls")):
            if spec is not None:
                await asyncio.to_thread(engine_client.compile_grammar, spec)
        return inp
    except GrammarError as exc:
        log.warning("tool-call grammar dropped, the reply stays free: %s", exc)
        return dataclasses.replace(inp, params=dataclasses.replace(inp.params, tool_trigger=None))


async def submit(
    engine_client: EngineClient, info: ModelInfo, record: RequestRecord, inp: GenerationInput, prompt: str | list[int]
) -> GenerationJob:
    """Plans and submits the request against `info` (the ModelInfo the view fetched for it); its row
    is written whether the engine takes it or refuses it. Refusals propagate (the API maps each to
    its status); invalid input is not recorded."""
    API_REQUESTS.labels(record.model, record.endpoint).inc()
    if inp.params.structured is not None:  # compiled (and cached) in a worker thread: ~1 s the first time
        started = time.perf_counter()
        await asyncio.to_thread(engine_client.compile_grammar, inp.params.structured)
        GRAMMAR_COMPILE_TIME.labels(record.model).observe(time.perf_counter() - started)
        STRUCTURED_REQUESTS.labels(record.model, inp.params.structured["kind"]).inc()
    if inp.params.tool_trigger is not None:
        inp = await with_tool_trigger_compiled(engine_client, inp)
    try:
        # tokenizing a long prompt takes milliseconds: in a worker thread (the tokenizer drops the
        # GIL), so the event loop keeps delivering every other stream's tokens meanwhile
        token_ids, params = await asyncio.to_thread(plan, info, prompt, inp)
        stream = engine_client.submit(record.request_id, token_ids, params)
    except REFUSALS as exc:
        await services.request_create(**record.fields(inp.params), status=GenerationRequest.Status.REJECTED, error=str(exc))
        raise
    return GenerationJob.accepted(engine_client, record, stream, params, token_ids)
