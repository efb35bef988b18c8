"""OutputProcessor: sampled tokens into each request's RequestOutput (vLLM v1 makes the same cut).

A token is written to its sequence (its grammar and reasoning state follow it), detokenized, and
checked for an end (a stop string or token, EOS, a completed grammar, max_tokens, the context);
a completion that ends frees its slot at once, and the request ends with its last completion.
Aborts, failed steps and pooled embeddings end requests here too. Plain bookkeeping: no tensors.
"""

from __future__ import annotations

import time

from .engine_stats import TokenRate
from .outputs import RequestOutput, TokenLogprob
from .scheduler import ScheduledBatch, Scheduler
from .sequence import Sequence
from .spec_decode.verification import spec_counts


class OutputProcessor:
    def __init__(self, scheduler: Scheduler, requests: dict[str, list[Sequence]], bundle, max_model_len: int):
        self.scheduler = scheduler
        self.requests = requests  # the engine's: each request's completions, until the request ends
        self.bundle = bundle  # its eos_token_ids are read at each token (tests change them)
        self.max_model_len = max_model_len
        self.generated = TokenRate()  # tokens written: the total and the recent rate
        self.detokenize_seconds = 0.0  # spent in the detokenizers (engine/timing/step_times.py)

    def advance(self, seq: Sequence, token_id: int) -> str:
        """Writes one token to the sequence, its grammar, reasoning state and detokenizer; its text.
        (A resumed request's delivered tokens come through here unreported: engine/resume.py.)"""
        seq.token_ids.append(token_id)
        if seq.active_matcher is not None:
            seq.matcher.consume_token(token_id)
        if seq.reasoning is not None and seq.reasoning.observe(seq.output_token_ids) and seq.matcher is not None:
            for written in seq.output_token_ids:  # no reasoning after all: the grammar reads the reply from its start
                seq.matcher.consume_token(written)
        started = time.perf_counter()
        text = seq.detokenizer.add_tokens([token_id])
        self.detokenize_seconds += time.perf_counter() - started
        return text

    def append_token(self, seq: Sequence, token_id: int, logprob, now: float) -> RequestOutput:
        first = seq.first_token_time is None
        if first:
            seq.first_token_time = now
        text = self.advance(seq, token_id)
        if logprob is not None:
            logprob.token = seq.detokenizer.token_text(token_id)
            logprob.top = [(tid, seq.detokenizer.token_text(tid), lp) for tid, _, lp in logprob.top]
        reason = self.finish_reason(seq, token_id)
        done = False
        if reason is not None:
            if seq.detokenizer.stop_matched is None:
                text += seq.detokenizer.finish()
            self.scheduler.finish(seq, reason)
            done = self.request_done(seq)
        prompt_logprobs = seq.prompt_logprobs if first and seq.prompt_logprobs is not None else None
        return self.output(
            seq,
            text,
            [token_id],
            finished=done,
            finish_reason=reason,
            logprobs=[logprob] if logprob else None,
            prompt_logprobs=prompt_logprobs,
        )

    def finish_reason(self, seq: Sequence, token_id: int) -> str | None:
        params = seq.params
        if seq.detokenizer.stop_matched is not None:
            seq.stop_reason = seq.detokenizer.stop_matched
            return "stop"
        if token_id in self.bundle.eos_token_ids and not params.ignore_eos:
            return "stop"
        if token_id in params.stop_token_ids:
            seq.stop_reason = token_id
            return "stop"
        if seq.active_matcher is not None and (seq.matcher.is_stopped() or seq.matcher.is_error()):
            return "stop"  # the grammar is complete: nothing more may follow
        if (params.max_tokens is not None and seq.num_output_tokens >= params.max_tokens) or len(seq) >= self.max_model_len:
            return "length"
        return None

    def request_done(self, seq: Sequence) -> bool:
        """Whether `seq` was the request's last unfinished completion (the request then ends)."""
        group = self.requests.get(seq.request_id, [])
        if any(not s.is_finished or s.forks_left for s in group):
            return False
        self.requests.pop(seq.request_id, None)
        return True

    def record_prompt_logprobs(self, seq: Sequence, first: int, targets: list[int], rows) -> None:
        """The prompt's tokens at positions first+1.. (`targets`) with their (logprob, top) `rows`."""
        text = seq.detokenizer.token_text
        for i, (token_id, (lp, top)) in enumerate(zip(targets, rows)):
            seq.prompt_logprobs[first + 1 + i] = TokenLogprob(
                token_id=token_id, token=text(token_id), logprob=lp, top=[(t, text(t), v) for t, v in top]
            )

    def pooled(self, seq: Sequence, vector: list[float]) -> RequestOutput:
        """An embedding request ends with its prompt: no decode slot."""
        self.scheduler.finish(seq, "stop")
        return self.output(seq, "", [], finished=self.request_done(seq), finish_reason="stop", embedding=vector)

    def aborted(self, request_id: str) -> RequestOutput | None:
        """Ends every completion of the request now; its final output, or None for an unknown id."""
        group = self.requests.pop(request_id, None)
        if group is None:
            return None
        running = [seq for seq in group if not seq.is_finished]
        for seq in running:
            self.scheduler.finish(seq, "abort")
        last = running[0] if running else group[0]
        return self.output(last, "", [], finished=True, finish_reason="abort")

    def failed(self, batch: ScheduledBatch, exc: Exception) -> list[RequestOutput]:
        """Every request with a sequence in the failed step ends with an error, all its completions."""
        outputs = []
        for seq in batch.decodes + batch.verifies + [s for s, _ in batch.prefills]:
            group = self.requests.pop(seq.request_id, None)
            if group is None:
                continue  # its request already failed through another completion
            for member in group:
                if not member.is_finished:
                    self.scheduler.finish(member, "error")
            outputs.append(self.output(seq, "", [], finished=True, finish_reason="error", error=f"{type(exc).__name__}: {exc}"))
        return outputs

    def output(
        self,
        seq: Sequence,
        text: str,
        token_ids: list[int],
        *,
        finished: bool,
        finish_reason: str | None = None,
        logprobs=None,
        error=None,
        prompt_logprobs=None,
        embedding=None,
    ) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            text=text,
            token_ids=token_ids,
            finished=finished,
            finish_reason=finish_reason if finish_reason is not None else (seq.finish_reason if finished else None),
            prompt_tokens=seq.num_prompt_tokens,
            completion_tokens=seq.num_output_tokens,
            logprobs=logprobs,
            error=error,
            arrival_time=seq.arrival_time,
            scheduled_time=seq.scheduled_time,
            first_token_time=seq.first_token_time,
            finished_time=seq.finished_time,
            index=seq.index,
            stop_reason=seq.stop_reason,
            num_cached_tokens=seq.reported_cached_tokens,
            prompt_logprobs=prompt_logprobs,
            reasoning_tokens=seq.reasoning.tokens if seq.reasoning is not None else 0,
            embedding=embedding,
            **spec_counts(seq),
        )
