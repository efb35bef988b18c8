"""Constrained decoding: a request's grammar decides which tokens its row may sample.

A request asks through `SamplingParams.structured`, {"kind", "value", "param"}: kind is
json_schema (value: the schema), json_object (any JSON object), regex, choice (a list of
strings), grammar (Lark, or llama.cpp's GBNF/EBNF) or lark (llguidance's Lark, as tool calling
builds it); param is the field the client used, for
error messages. llguidance (docs/performance.md says why it, not xgrammar) turns the grammar
into a matcher per sequence: before each sample the matcher's token mask bans the rest of the
row's vocabulary, and each sampled token advances it; when the grammar is complete the matcher
stops the sequence.

Grammars are compiled (validated against the tokenizer) once per distinct spec and cached; the
web side compiles before a request is queued, so an invalid one is a 400 and the engine loop
only ever builds matchers from cached, valid grammars.
"""

from __future__ import annotations

import copy
import functools
import json
import threading

import numpy as np
import torch

from .sampling_params import SamplingParamsError

KINDS = ("json_schema", "json_object", "regex", "choice", "grammar", "lark")
# Compact JSON: no optional whitespace between tokens, so a model cannot pad output forever.
JSON_OPTIONS = {"whitespace_flexible": False}


class GrammarError(SamplingParamsError):
    """A grammar, schema, regex or choice list that cannot constrain decoding."""


def grammar_source(kind: str, value) -> str:
    """llguidance's grammar text for a spec (not yet checked against a tokenizer)."""
    import llguidance
    from llguidance import LLMatcher

    if kind == "json_object":
        return LLMatcher.grammar_from_json_schema({"type": "object"}, overrides=JSON_OPTIONS)
    if kind == "json_schema":
        schema = json.loads(value) if isinstance(value, str) else value
        return LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    if kind == "regex":
        return LLMatcher.grammar_from_regex(value)
    if kind == "choice":
        return llguidance.grammar_from("choice", list(value))
    if kind == "grammar":
        return llguidance.grammar_from("grammar", value)
    if kind == "lark":  # llguidance's Lark, %json included (tool calls: api/tool_calls.py)
        return LLMatcher.grammar_from_lark(value)
    raise ValueError(f"unknown structured output kind {kind!r}")


class Grammars:
    """The tokenizer as llguidance sees it, the compiled-grammar cache, and the per-step masks."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: set[int]):
        import llguidance

        backend = copy.copy(tokenizer.backend_tokenizer)
        backend.no_padding()
        backend.no_truncation()
        eos = sorted(eos_token_ids) or [tokenizer.eos_token_id]
        self.tokenizer = llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=eos)
        self.vocab_size = vocab_size
        self._lock = threading.Lock()  # the cache is filled from event loops and the engine thread

    def compile(self, spec: dict) -> str:
        """The validated grammar for a spec, from the cache after the first time; GrammarError if invalid."""
        key = (spec["kind"], json.dumps(spec.get("value"), sort_keys=True))
        with self._lock:
            return self._compile(*key, spec.get("param") or "response_format")

    @functools.lru_cache(maxsize=512)  # noqa: B019  (one Grammars per engine, kept for its life)
    def _compile(self, kind: str, value_json: str, param: str) -> str:
        from llguidance import LLMatcher

        try:
            grammar = grammar_source(kind, json.loads(value_json))
        except (ValueError, TypeError) as exc:
            raise GrammarError(param, f"{param} is not a valid {kind.replace('_', ' ')}: {exc}") from None
        is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        if is_error:
            raise GrammarError(param, f"{param} is not a valid {kind.replace('_', ' ')}: {messages[0]}")
        return grammar

    def matcher(self, spec: dict):
        from llguidance import LLMatcher

        return LLMatcher(self.tokenizer, self.compile(spec), log_level=0)

    def allowed(self, matchers: list) -> torch.Tensor:
        """[len(matchers), vocab] bool: the tokens each matcher allows next."""
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        bitmask = allocate_token_bitmask(len(matchers), self.vocab_size)
        for row, matcher in enumerate(matchers):
            fill_next_token_bitmask(matcher, bitmask, row)
        words = torch.from_numpy(bitmask.view(np.uint32).astype(np.int64))
        bits = (words.unsqueeze(-1) >> torch.arange(32)) & 1
        return bits.view(len(matchers), -1)[:, : self.vocab_size].bool()
