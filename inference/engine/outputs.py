"""What the engine hands back per request per step."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    """The chosen token's log-probability and the top-N alternatives at that position."""

    token_id: int
    token: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (token_id, token text, logprob)


@dataclass
class RequestOutput:
    """One step's increment for one request.

    `text` and `token_ids` are deltas: concatenating every output's `text` (of one `index`)
    gives that completion. Timings are `time.monotonic()` seconds, so the serving layer can compute
    queue time and time to first token without asking the engine again.
    """

    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    error: str | None = None
    arrival_time: float = 0.0
    scheduled_time: float | None = None  # first time the request got a batch slot
    first_token_time: float | None = None
    finished_time: float | None = None
    # n > 1: which completion this delta belongs to. `finish_reason` set means that completion
    # ended; `finished` means the whole request did (its last output).
    index: int = 0
    stop_reason: str | int | None = None  # the stop string or stop token id that ended the completion
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    prompt_logprobs: list[TokenLogprob | None] | None = None  # with a completion's first output, if asked
    embedding: list[float] | None = None  # an embedding request's pooled hidden state (not normalized)
    reasoning_tokens: int = 0  # of completion_tokens, those written while reasoning (engine/sample/reasoning.py)
    # a request resumed after its engine died: where it ran, [{"engine", "tokens"}, ...] (engine/resume.py)
    resumes: list[dict] | None = None
    # speculative decoding, this completion so far: tokens guessed and accepted, and of them those
    # the request's prediction supplied (engine/spec_decode/proposer.py)
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    prediction_draft_tokens: int = 0
    prediction_accepted_tokens: int = 0
