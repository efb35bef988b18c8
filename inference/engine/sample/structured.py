"""Constrained decoding: a request's grammar decides which tokens its row may sample.

A request asks through `SamplingParams.structured`, {"kind", "value", "param"}: kind is
json_schema (value: the schema), json_object (any JSON object), regex, choice (a list of
strings), grammar (Lark, or llama.cpp's GBNF/EBNF) or lark (llguidance's Lark, as tool calling
builds it); param is the field the client used, for
error messages. llguidance (docs/performance-log.md says why it, not xgrammar) turns the grammar
into a matcher per sequence: before each sample the matcher's token mask bans the rest of the
row's vocabulary, and each sampled token advances it; when the grammar is complete the matcher
stops the sequence.

Grammars are compiled (validated against the tokenizer) once per distinct spec and cached; the
web side compiles before a request is queued, so an invalid one is a 400 and the engine loop
only ever builds matchers from cached, valid grammars.

A row's mask depends only on the tokens its matcher has consumed, all known once the step is
scheduled, so the engine starts the step's masks (`start_masks`) on a worker thread before the
forward pass and collects them after it: llguidance and our kernels both drop the GIL, so the
masks are computed while the model runs instead of after it.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from .json_schemas import grammar_schema
from .sampling_params import SamplingParamsError

# Compact JSON: no optional whitespace between tokens, so a model cannot pad output forever.
JSON_OPTIONS = {"whitespace_flexible": False}


class GrammarError(SamplingParamsError):
    """A grammar, schema, regex or choice list that cannot constrain decoding."""


def grammar_source(kind: str, value) -> str:
    """llguidance's grammar text for a spec (not yet checked against a tokenizer)."""
    import llguidance
    from llguidance import LLMatcher

    if kind == "json_object":
        return LLMatcher.grammar_from_json_schema(grammar_schema({"type": "object"}), overrides=JSON_OPTIONS)
    if kind == "json_schema":
        schema = json.loads(value) if isinstance(value, str) else value
        return LLMatcher.grammar_from_json_schema(grammar_schema(schema), overrides=JSON_OPTIONS)
    if kind == "regex":
        return LLMatcher.grammar_from_regex(value)
    if kind == "choice":
        return llguidance.grammar_from("choice", list(value))
    if kind == "grammar":
        return llguidance.grammar_from("grammar", value)
    if kind == "lark":  # llguidance's Lark, %json included (tool calls: api/common/tool_calls.py)
        return LLMatcher.grammar_from_lark(value)
    raise ValueError(f"unknown structured output kind {kind!r}")


# One thread for the process: a step's masks are computed in order, beside the engine loop's
# forward pass (it starts on first use; engines restarted over the same weights share it).
MASK_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-masks")


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
        """The validated grammar for a spec, from the cache after the first time; GrammarError if invalid.
        The key keeps the spec's own key order: a schema's properties are written in the order it
        lists them, so two schemas that differ only in order are two grammars."""
        key = (spec["kind"], json.dumps(spec.get("value")))
        with self._lock:
            return self._compile(*key, spec.get("param") or "response_format")

    @functools.lru_cache(maxsize=512)  # noqa: B019  (one Grammars per engine, kept for its life)
    def _compile(self, kind: str, value_json: str, param: str) -> str:
        from llguidance import LLMatcher

        try:
            grammar = grammar_source(kind, json.loads(value_json))
        except (ValueError, TypeError) as exc:
            raise GrammarError(param, f"{param} is not a valid {kind.replace('_', ' ')}: {exc}") from None
        except RecursionError:
            raise GrammarError(param, f"{param} is nested too deeply") from None
        is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        if is_error:
            raise GrammarError(param, f"{param} is not a valid {kind.replace('_', ' ')}: {messages[0]}")
        return grammar

    def matcher(self, spec: dict):
        from llguidance import LLMatcher

        return LLMatcher(self.tokenizer, self.compile(spec), log_level=0)

    def start_masks(self, seqs: list) -> PendingMasks:
        """Starts computing, on the mask thread, the masks of the constrained sequences among
        `seqs` (those about to sample); their matchers must not be used at all (llguidance holds
        them while it computes) until the masks are collected or settled."""
        constrained = [seq for seq in seqs if seq.active_matcher is not None]
        if not constrained:
            return PendingMasks([], None, self)
        return PendingMasks(constrained, MASK_WORKER.submit(self._timed_allowed, [s.matcher for s in constrained]), self)

    def _timed_allowed(self, matchers: list) -> tuple[torch.Tensor, float]:
        started = time.perf_counter()
        return self.allowed(matchers), time.perf_counter() - started

    def allowed(self, matchers: list) -> torch.Tensor:
        """[len(matchers), vocab] bool: the tokens each matcher allows next."""
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        bitmask = allocate_token_bitmask(len(matchers), self.vocab_size)
        for row, matcher in enumerate(matchers):
            fill_next_token_bitmask(matcher, bitmask, row)
        # numpy, not torch: torch ops from this thread would start a second OpenMP team that spins
        # against the forward pass's threads on the same cores
        bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, : self.vocab_size]
        return torch.from_numpy(bits.view(np.bool_))


@dataclass
class MaskTimes:
    """What a step's masks cost: seconds computing them, the part of it the engine loop waited
    for after the forward pass, and how many rows they were for (the grammar_mask_* counters)."""

    computing: float = 0.0
    waited: float = 0.0
    rows: int = 0


class PendingMasks:
    """A step's masks, being computed on the mask thread while the model runs."""

    def __init__(self, seqs: list, future: Future | None, grammars: Grammars | None):
        self.seqs = seqs
        self.future = future
        self.grammars = grammars

    def collect(self, sampling: list) -> tuple[dict[int, torch.Tensor], MaskTimes]:
        """({id(seq): allowed [V] bool} for every constrained sequence of `sampling`, what they
        cost). Sequences the mask thread did not start with (completions forked this step, with
        fresh matchers) get theirs computed now, in this thread, all of it waited for."""
        times = MaskTimes()
        masks = {}
        if self.future is not None:
            started = time.perf_counter()
            allowed, times.computing = self.future.result()
            times.waited = time.perf_counter() - started
            masks = {id(seq): allowed[row] for row, seq in enumerate(self.seqs)}
        late = [seq for seq in sampling if seq.active_matcher is not None and id(seq) not in masks]
        if late:
            started = time.perf_counter()
            masks.update(zip(map(id, late), self.grammars.allowed([s.matcher for s in late])))
            spent = time.perf_counter() - started
            times.computing += spent
            times.waited += spent
        times.rows = len(masks)
        return masks, times

    def settle(self) -> None:
        """Waits out the computation, whatever its outcome (a failed step must not leave a matcher in use)."""
        if self.future is not None:
            self.future.exception()


NO_MASKS = PendingMasks([], None, None)  # an engine that has never had a constrained request


def one_token_mask(vocab_size: int, token_id: int) -> torch.Tensor:
    """[vocab] bool allowing one token: a sampled step that must write it (engine/sample/reasoning.py)."""
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[token_id] = True
    return mask
