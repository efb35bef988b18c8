"""Fields that clients send and this server does not use: accepted, checked, logged once, dropped.

OpenAI's current chat, completions and Responses references, vLLM's extensions and llama-server's
each name fields that change nothing here (routing, caching hints, retention, samplers we do not
have). vLLM and llama-server ignore every field they do not know; OpenAI refuses only names it
does not know. This server does better than both: a field named in any of those references is
accepted (its value still checked for type, so a bad value is a 400), logged once per process per
name, and dropped before validation; a name none of them documents (a typo such as
`temprature`) is still a 400 naming it. docs/api.md lists these fields ("Fields clients send").
"""

from __future__ import annotations

import logging

from .errors import bad_request

log = logging.getLogger("inference.api")

BOOL, INT, NUMBER, STRING, OBJECT, LIST, ANY = "a boolean", "an integer", "a number", "a string", "an object", "a list", None
_KINDS = {BOOL: (bool,), INT: (int,), NUMBER: (int, float), STRING: (str,), OBJECT: (dict,), LIST: (list,)}

# Accepted and ignored on /v1/chat/completions, /v1/completions and /v1/responses, with the type
# each value must have. Where a field is honoured on some API (e.g. `n_probs`), that API's
# parser reads it first and it never reaches this table.
IGNORED = {
    # OpenAI
    "user": STRING,
    "metadata": OBJECT,
    "store": BOOL,
    "service_tier": STRING,
    "parallel_tool_calls": BOOL,
    "prompt_cache_key": STRING,
    "prompt_cache_retention": STRING,
    "safety_identifier": STRING,
    "verbosity": STRING,
    "web_search_options": OBJECT,
    "background": BOOL,
    "include": LIST,
    "truncation": STRING,
    "max_tool_calls": INT,
    "top_logprobs": INT,  # on /v1/responses (chat honours it)
    # vLLM
    "length_penalty": NUMBER,
    "skip_special_tokens": BOOL,
    "spaces_between_special_tokens": BOOL,
    "truncate_prompt_tokens": INT,
    "add_special_tokens": BOOL,
    "documents": LIST,
    "mm_processor_kwargs": OBJECT,
    "guided_decoding_backend": STRING,
    "guided_whitespace_pattern": STRING,
    "priority": INT,
    "request_id": STRING,
    "return_tokens_as_token_ids": BOOL,
    "return_token_ids": BOOL,
    "kv_transfer_params": OBJECT,
    "vllm_xargs": OBJECT,
    "media_io_kwargs": OBJECT,
    "echo": BOOL,  # on chat (vLLM: the last message repeated); /v1/completions honours it
    # llama-server
    "cache_prompt": BOOL,
    "id_slot": INT,
    "n_probs": INT,
    "n_keep": INT,
    "n_indent": INT,
    "n_cmpl": INT,
    "t_max_predict_ms": INT,
    "t_max_prompt_ms": INT,
    "typical_p": NUMBER,
    "dynatemp_range": NUMBER,
    "dynatemp_exponent": NUMBER,
    "repeat_last_n": INT,
    "penalty_last_n": INT,
    "dry_multiplier": NUMBER,
    "dry_base": NUMBER,
    "dry_allowed_length": INT,
    "dry_penalty_last_n": INT,
    "dry_sequence_breakers": LIST,
    "xtc_probability": NUMBER,
    "xtc_threshold": NUMBER,
    "mirostat": INT,
    "mirostat_tau": NUMBER,
    "mirostat_eta": NUMBER,
    "min_keep": INT,
    "top_n_sigma": NUMBER,
    "samplers": ANY,
    "timings_per_token": BOOL,
    "return_progress": BOOL,
    "post_sampling_probs": BOOL,
    "response_fields": LIST,
    "return_tokens": BOOL,
    "lora": LIST,
    "reasoning_format": STRING,
    "parse_tool_calls": BOOL,
    "thinking_forced_open": BOOL,
}
# Documented constraints this server cannot apply: ignoring them would change what a request asks
# for, so a value that constrains anything is refused by name (an empty one is accepted).
UNSUPPORTED = {"allowed_token_ids", "bad_words", "structural_tag", "logits_processors"}
_logged: set[str] = set()


def drop_ignored(body: dict, honoured: set[str]) -> dict:
    """The body without the fields this API ignores (each type-checked, each name logged once);
    `honoured` are the fields the API reads itself, left in place."""
    kept = {}
    for name, value in body.items():
        if name in UNSUPPORTED and name not in honoured:
            if value:
                raise bad_request(f"{name} is not supported by this server", param=name)
            continue
        kind = IGNORED.get(name, "") if name not in honoured else ""
        if kind == "":
            kept[name] = value
            continue
        if kind is not ANY and (not isinstance(value, _KINDS[kind]) or (isinstance(value, bool) and kind != BOOL)):
            raise bad_request(f"{name} must be {kind}, got {type(value).__name__}", param=name)
        if name not in _logged:
            _logged.add(name)
            log.info("request field %r is accepted and ignored: it changes nothing on this server", name)
    return kept
