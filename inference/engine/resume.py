"""Resuming a request another engine was serving when it died: its prompt and the tokens already
delivered are all it takes to carry on.

Each unfinished completion becomes a sequence whose delivered tokens are already its output, as a
preempted sequence's are: the next step prefills prompt + output (cheap where the prefix cache has
the prompt) and generation continues. Replaying the delivered tokens puts everything that reads
the output where the first engine left it: the grammar matcher, the reasoning state, the tool-call
trigger, the incremental detokenizer (so a stop string that spans the join is found, and text held
back for a possible stop string comes out as it would have), `max_tokens` and usage (counted over
the whole output), and a seeded generator, which skips the draws those tokens took (one row of
`vocab` uniforms a sampled token, as the sampler draws them), so a seeded request continues as if
nothing happened. A greedy one always does.
"""

from __future__ import annotations

from .sample.sampler import skip_draws
from .sequence import Sequence


def replay(engine, seq: Sequence, delivered: list[int]) -> None:
    """Writes `delivered` into a new sequence's output without computing or reporting it."""
    for token_id in delivered:
        engine.output_processor.advance(seq, token_id)
        engine._watch_tool_calls([seq])  # a tag (or an opening brace) among them opens the call grammar, as live
    if delivered:
        seq.prompt_logprobs = None  # reported with the first output, before the first engine died
        seq.first_token_time = seq.arrival_time
        skip_draws(seq.generator, len(delivered), engine.bundle.model.vocab_size, seq.params)


def check_resume(resume, n: int) -> None:
    """`resume`: one entry per completion, its delivered token ids, or None where it had finished."""
    if not isinstance(resume, list) or len(resume) != n:
        raise ValueError(f"resume: one entry per completion ({n}), each the delivered token ids or None")
    if all(entry is None for entry in resume):
        raise ValueError("resume: every completion had finished; nothing to resume")
    for entry in resume:
        if entry is not None and not all(isinstance(t, int) for t in entry):
            raise ValueError("resume: token ids are integers")


class Progress:
    """What a request's client has been sent so far, kept where its outputs pass (the engine
    thread, or a web process's remote client): enough to resume it on another engine, and the
    record of where it ran ("segments": each engine and the tokens it delivered)."""

    def __init__(self, prompt: list[int], params, engine: str, resume: list | None = None):
        """`resume`: the request arrives already resumed (add_request's argument): what it carries
        counts as delivered, so a second death resumes from all of it."""
        self.prompt, self.params = list(prompt), params
        self.delivered: dict[int, list[int]] = {i: list(t) for i, t in enumerate(resume or []) if t is not None}
        self.finished: set[int] = {i for i, t in enumerate(resume or []) if t is None}
        self.segments: list[dict] = [{"engine": engine, "tokens": 0}]
        self.started = False  # reached an engine (an engine thread's inbox may still hold it)

    def record(self, out) -> None:
        if out.token_ids and out.embedding is None:
            self.delivered.setdefault(out.index, []).extend(out.token_ids)
            self.segments[-1]["tokens"] += len(out.token_ids)
        if out.finish_reason is not None:
            self.finished.add(out.index)

    @property
    def resumed(self) -> bool:
        return len(self.segments) > 1

    def resume_on(self, engine: str) -> list:
        """The `resume` argument of add_request for the engine taking the request over."""
        self.segments.append({"engine": engine, "tokens": 0})
        return [None if i in self.finished else list(self.delivered.get(i, [])) for i in range(self.params.n)]

    def moved(self, engine: str) -> None:
        """The request now runs on `engine` (a remote client learns it when the engine accepts it)."""
        self.segments[-1]["engine"] = engine
