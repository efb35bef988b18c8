"""llama-server's POST /infill: code completion between a prefix and a suffix.

`input_prefix`, `input_suffix`, `input_extra` ([{"filename", "text"}], repository context) and
`prompt` (text after the prefix) become a fill-in-the-middle prompt in the served model's FIM
tokens, laid out as llama-server lays it out (api/llama/fim.py); sampling fields take llama-server's
names too (`n_predict`, `repeat_penalty`). The reply is llama-server's completion shape
(api/llama/format.py). A model without FIM tokens gets a 400 that says so.
"""

from __future__ import annotations

import uuid

from ...serving.generation_input import GenerationInput
from ..common.endpoint import api_endpoint, serve, served_model
from ..common.errors import bad_request
from ..common.extra_fields import drop_ignored
from ..common.request_body import parse_json_body
from ..common.sampling_fields import (
    ENGINE_SAMPLING_FIELDS,
    check_limits,
    check_unknown_fields,
    expect,
    max_tokens_field,
    model_name,
    sampling_params,
    with_aliases,
    without_nulls,
)
from .fim import fim_ids
from .format import LlamaCompletionReply

INFILL_FIELDS = {
    "input_prefix",
    "input_suffix",
    "input_extra",
    "prompt",
    "model",
    "max_tokens",
    "stream",
} | ENGINE_SAMPLING_FIELDS


def _extra(value) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request("input_extra must be a list of {filename, text} objects", param="input_extra")
    for index, chunk in enumerate(value):
        if (
            not isinstance(chunk, dict)
            or not isinstance(chunk.get("text", ""), str)
            or not isinstance(chunk.get("filename", ""), str)
        ):
            raise bad_request(f"input_extra[{index}] must be {{filename: string, text: string}}", param=f"input_extra[{index}]")
    return value


def parse_infill(body: dict) -> tuple[GenerationInput, dict]:
    """The request, and its FIM parts (prefix, suffix, extra, prompt)."""
    raw = body
    body = drop_ignored(with_aliases(without_nulls(body)), INFILL_FIELDS)
    check_unknown_fields(body, INFILL_FIELDS)
    parts = {
        "prefix": expect(body, "input_prefix", str, "a string") or "",
        "suffix": expect(body, "input_suffix", str, "a string") or "",
        "extra": _extra(body.get("input_extra")),
        "prompt": expect(body, "prompt", str, "a string") or "",
    }
    if not (parts["prefix"] or parts["suffix"] or parts["prompt"]):
        raise bad_request("input_prefix, input_suffix or prompt is required", param="input_prefix")
    name = "n_predict" if "n_predict" in raw else "max_tokens"  # as the client spelled it
    max_tokens, _, defaulted = max_tokens_field(body, ("max_tokens",), None)  # None: the rest of the context
    checked = check_limits(body, max_tokens, name, defaulted=defaulted)
    fields = {key: value for key, value in body.items() if key in ENGINE_SAMPLING_FIELDS}
    params = sampling_params(fields, max_tokens=None if defaulted else checked, max_tokens_param=name, logprobs=None)
    stream = bool(expect(body, "stream", bool, "a boolean"))
    inp = GenerationInput(endpoint="infill", params=params, model=model_name(body), stream=stream, given=frozenset(body))
    return inp, parts


@api_endpoint("POST")
async def infill(request):
    inp, parts = parse_infill(parse_json_body(request))

    def prompts(info):
        max_tokens = inp.params.max_tokens or 0
        ids = fim_ids(
            info,
            parts["prefix"],
            parts["suffix"],
            max_tokens=max_tokens,
            param="input_prefix",
            extra=parts["extra"],
            prompt=parts["prompt"],
        )
        return [(ids, info.tokenizer.decode(ids))]

    def reply(served, model, request_id, prompts, jobs):
        return LlamaCompletionReply(request_id, model, jobs[0], prompts[0][1])

    async with served_model(inp.model) as served:
        return await serve(request, served, inp, f"infill-{uuid.uuid4().hex}", prompts, reply)
