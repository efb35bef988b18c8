"""POST /v1/embeddings: pooled hidden states of our own model, in OpenAI's shape.

`input` is a string, a list of strings, token ids, or a list of token-id lists. Each input is a
prefill-only request in the same scheduler as generation (it batches with it and ends with its
prompt, never holding a decode slot: engine/layers/pooling.py, engine.step); its vector is pooled as
the checkpoint or MINIVLLM_POOLING says, cut to `dimensions` where the model is Matryoshka, and
L2-normalized. `encoding_format: base64` sends little-endian float32 bytes, as OpenAI's does.
Inputs are submitted a window at a time, so a batch of thousands never overflows the queue.
"""

from __future__ import annotations

import base64
import math
import struct
import time
import uuid

from django.http import JsonResponse

from ...engine.sample.sampling_params import SamplingParams
from ...serving.generation_input import GenerationInput
from ..common import key_limits
from ..common.endpoint import api_endpoint, plan_the_batch, served_for, start_job
from ..common.errors import ApiError, bad_request
from ..common.extra_fields import drop_ignored
from ..common.request_body import parse_json_body
from ..common.sampling_fields import check_unknown_fields, expect, without_nulls
from .stream_format import run_to_end

EMBEDDING_FIELDS = {"input", "model", "encoding_format", "dimensions", "keep_alive"}
MAX_INPUTS = 2048  # OpenAI's limit per request
WINDOW = 32  # inputs in flight at once


def embedding_inputs(value) -> list[str | list[int]]:
    def token_ids(item, param: str) -> list[int]:
        if not item or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in item):
            raise bad_request(f"{param} must be a non-empty list of token ids (integers >= 0)", param=param)
        return list(item)

    if isinstance(value, str):
        value = [value]
    elif isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string, a list of strings, token ids or a list of token-id lists", param="input")
    if len(value) > MAX_INPUTS:
        raise bad_request(f"at most {MAX_INPUTS} inputs per request, got {len(value)}", param="input")
    inputs = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise bad_request(f"input[{index}] must not be empty", param=f"input[{index}]")
            inputs.append(item)
        elif isinstance(item, list):
            inputs.append(token_ids(item, f"input[{index}]"))
        else:
            raise bad_request(f"input[{index}] must be a string or a list of token ids", param=f"input[{index}]")
    return inputs


def _dimensions(body: dict, info) -> int | None:
    dimensions = expect(body, "dimensions", int, "an integer")
    if dimensions is None:
        return None
    return checked_dimensions(dimensions, info)


def checked_dimensions(dimensions: int, info) -> int:
    """`dimensions` where the model's embeddings can be cut to it, else a 400."""
    allowed = info.matryoshka_dimensions
    if allowed is None:
        raise bad_request(
            "dimensions: this model's embeddings cannot be shortened (it is not a Matryoshka model)", param="dimensions"
        )
    most = info.hidden_size or 0
    if dimensions < 1 or (most and dimensions > most) or (allowed and dimensions not in allowed):
        choices = ", ".join(map(str, allowed)) if allowed else f"1 to {most}"
        raise bad_request(f"dimensions must be one of {choices}, got {dimensions}", param="dimensions")
    return dimensions


def _vector(values: list[float], dimensions: int | None) -> list[float]:
    values = values[:dimensions] if dimensions else values
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _encoded(vector: list[float], encoding: str):
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


@api_endpoint("POST")
async def embeddings(request):
    body = drop_ignored(without_nulls(parse_json_body(request)), EMBEDDING_FIELDS)
    check_unknown_fields(body, EMBEDDING_FIELDS)
    if "input" not in body:
        raise bad_request("input is required", param="input")
    inputs = embedding_inputs(body["input"])
    encoding = expect(body, "encoding_format", str, "a string") or "float"
    if encoding not in ("float", "base64"):
        raise bad_request("encoding_format must be float or base64", param="encoding_format")
    async with served_for(body) as served:
        model = served.name
        vectors, prompt_tokens, _ = await embed(request, served, inputs, model, _dimensions(body, served.info))
    data = [{"object": "embedding", "index": i, "embedding": _encoded(vector, encoding)} for i, vector in enumerate(vectors)]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return JsonResponse({"object": "list", "data": data, "model": model, "usage": usage})


async def embed(request, served, inputs: list, model: str, dimensions: int | None) -> tuple[list[list[float]], int, float]:
    """(each input's unit vector, cut to `dimensions`; the prompt tokens; the seconds it took): the
    inputs run as prefill-only requests, a window at a time (module docstring). Ollama's /api/embed
    shares it."""
    if dimensions is not None:
        dimensions = checked_dimensions(dimensions, served.info)
    started = time.monotonic()
    params = SamplingParams(max_tokens=1, pooling=served.info.pooling)
    inp = GenerationInput(endpoint="embeddings", params=params, prompts=inputs, model=model, stream=False, given=frozenset())
    request_id = f"embd-{uuid.uuid4().hex}"
    slot = key_limits.acquire(request.api_caller)
    vectors, prompt_tokens = [], 0
    try:
        pairs = [(item, item if isinstance(item, str) else "") for item in inputs]
        submitted = inputs  # with several, their token ids: every input is checked (off the loop) before any runs
        if len(pairs) > 1:  # and one that cannot be refuses the request
            submitted = await plan_the_batch(request, served, inp, request_id, pairs, model)
        for start in range(0, len(inputs), WINDOW):
            jobs = []
            try:
                for index in range(start, min(start + WINDOW, len(inputs))):
                    text = pairs[index][1]
                    job_id = request_id if len(inputs) == 1 else f"{request_id}-{index}"
                    jobs.append(
                        await start_job(
                            request, served, inp, request_id=job_id, prompt=submitted[index], prompt_text=text, model=model
                        )
                    )
            except BaseException:
                for job in jobs:  # the window's submitted inputs are aborted with it
                    await job.close()
                raise
            await run_to_end(jobs)
            for job in jobs:
                if job.embedding is None:
                    raise ApiError(500, f"embedding failed: {job.error or 'no vector'}", code="generation_failed")
                prompt_tokens += job.prompt_tokens
                vectors.append(_vector(job.embedding, dimensions))
    finally:
        slot.release_unless_held()
    return vectors, prompt_tokens, time.monotonic() - started
