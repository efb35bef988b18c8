"""The messages between web processes and engine workers.

Everything on the wire is a plain dict of str/int/float/list (channels-redis packs with msgpack).
Engine timestamps are `time.monotonic()` of the engine's process; each message carries the
sender's clock (`now`) so the receiver can shift them onto its own clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import re

from ...engine.outputs import RequestOutput, TokenLogprob
from ...engine.sample.sampling_params import SamplingParams

# a plain channel per model: every engine serving that model receives from it, each message
# reaches exactly one engine (request_channel)
REQUEST_CHANNEL = "minivllm.engine"
# every web process joins it; engines publish their stats (the heartbeat) to it every second
STATS_GROUP = "minivllm.engine-stats"
HEARTBEAT_S = 1.0

# message types (Channels' "type" key; dots are the convention)
SUBMIT = "engine.submit"  # web -> REQUEST_CHANNEL
ABORT = "engine.abort"  # web -> the engine's own channel
STATS = "engine.stats"  # engine -> STATS_GROUP
ACCEPTED = "engine.accepted"  # engine -> web reply channel: the engine holding the request
REJECTED = "engine.rejected"  # engine -> web reply channel: submit raised (kind + message)
OUTPUTS = "engine.outputs"  # engine -> web reply channel: one step's outputs for that web process

log = logging.getLogger("inference.serving.remote")

_TIME_FIELDS = ("arrival_time", "scheduled_time", "first_token_time", "finished_time")


def request_channel(model: str | None) -> str:
    """The channel a model's requests go to: REQUEST_CHANNEL and the model's id, in the characters
    a channel name may hold (another character, or a name too long, gets a short hash so two ids
    never share one)."""
    if not model:
        return REQUEST_CHANNEL
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", model)[:60]
    if safe != model:
        safe += "-" + hashlib.sha1(model.encode()).hexdigest()[:8]
    return f"{REQUEST_CHANNEL}.{safe}"


def params_to_wire(params: SamplingParams) -> dict:
    """logit_bias goes as [id, bias] pairs: msgpack unpacks only string map keys by default."""
    data = dataclasses.asdict(params)
    data["logit_bias"] = [[token_id, bias] for token_id, bias in params.logit_bias.items()]
    return data


def params_from_wire(data: dict) -> SamplingParams:
    data = dict(data)
    data["logit_bias"] = {int(token_id): bias for token_id, bias in data.get("logit_bias") or []}
    return SamplingParams(**data)


def output_to_wire(out: RequestOutput) -> dict:
    return dataclasses.asdict(out)  # TokenLogprob -> dict, its `top` tuples -> lists (msgpack)


def output_from_wire(data: dict, *, clock_offset: float = 0.0) -> RequestOutput:
    """`clock_offset` = receiver's monotonic clock minus the sender's, applied to every timestamp."""
    data = dict(data)
    for name in ("logprobs", "prompt_logprobs"):
        if data.get(name) is not None:
            data[name] = [_logprob_from_wire(lp) for lp in data[name]]
    for name in _TIME_FIELDS:
        if data.get(name):
            data[name] = data[name] + clock_offset
    return RequestOutput(**data)


def _logprob_from_wire(data: dict | None) -> TokenLogprob | None:
    if data is None:  # a prompt's first token has no logprob
        return None
    return TokenLogprob(**{**data, "top": [tuple(alt) for alt in data.get("top") or []]})


async def receive(layer, channel: str) -> dict:
    """layer.receive that rides out Redis trouble (a restart, a read timeout) instead of dying."""
    while True:
        try:
            return await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("receive on %s failed (%s: %s); retrying", channel, type(exc).__name__, exc)
            await asyncio.sleep(0.5)
