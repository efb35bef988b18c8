"""A prompt as the engine takes it: token ids, and the limits every request must fit.

Text becomes ids by one rule, the tokenizer's own special-token policy (its BOS where it adds
one), and the limits are one function; the engine, the web side and the scale-out client all use
these two, so a prompt counts the same everywhere and is refused with the same message.
"""

from __future__ import annotations

from .errors import PromptTooLongError
from .sample.sampling_params import SamplingParams, SamplingParamsError


def prompt_token_ids(tokenizer, prompt: str | list[int]) -> list[int]:
    """Text through the tokenizer; a list of ids is taken as it is."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt).input_ids)
    return list(prompt)


def token_limit(max_model_len: int | None, kv_capacity_tokens: int | None) -> int | None:
    """The most tokens (prompt + completion) one request may hold: the context, or the KV pool if smaller."""
    limits = [n for n in (max_model_len, kv_capacity_tokens) if n]
    return min(limits) if limits else None


def check_request(
    token_ids: list[int], params: SamplingParams, *, vocab_size: int | None, limit: int | None, num_slots: int | None
) -> None:
    """Refuses what could never finish: an empty prompt, ids outside the vocabulary (the prompt's,
    logit_bias's), a prompt plus max_tokens beyond `limit` (PromptTooLongError names both numbers),
    or more completions (n) than the engine has batch slots."""
    if not token_ids:
        raise SamplingParamsError("prompt", "prompt must not be empty")
    if vocab_size and (min(token_ids) < 0 or max(token_ids) >= vocab_size):
        raise SamplingParamsError("prompt", f"prompt token ids must be in [0, {vocab_size})")
    if vocab_size and any(token_id >= vocab_size for token_id in params.logit_bias):
        raise SamplingParamsError("logit_bias", f"logit_bias token ids must be in [0, {vocab_size})")
    if vocab_size and params.prediction and max(params.prediction) >= vocab_size:
        raise SamplingParamsError("prediction", f"prediction token ids must be in [0, {vocab_size})")
    needed = params.max_tokens if params.max_tokens is not None else max(1, params.min_tokens)  # None: what is left
    if limit is not None and len(token_ids) + needed > limit:
        raise PromptTooLongError(len(token_ids), needed, limit)
    if num_slots and params.n > num_slots:
        raise SamplingParamsError("n", f"n must be at most {num_slots}, the engine's batch slots")
