"""Per-request timings and their summary: TTFT, TPOT, ITL, end-to-end latency, throughput.

Definitions (all from client-side timestamps, in seconds):
- TTFT: request sent -> the first chunk that brought a token.
- ITL: the gaps between tokens: a chunk that brought k tokens a gap g after the previous one
  counts k gaps of g / k. Tokens are counted per chunk from the server's own counts where it
  sends them (`usage` on every chunk under stream_options.continuous_usage_stats, as ours and
  vLLM do; llama-server's `timings.predicted_n` under timings_per_token), so a token is timed
  when the chunk that brought it came: llama-server streams an empty chunk for a token that
  prints as nothing (a padding token of the random-weight models), ours counts it with its next
  chunk; a server with neither counts its text chunks.
- TPOT: (e2e - TTFT) / (output_tokens - 1): the mean decode time per token after the first.
- e2e: request sent -> end of the stream.
Summaries report milliseconds, mean / p50 / p99 (linear-interpolated percentiles); None where
there is nothing to measure, so result files stay strict JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """What one request did, as the client saw it."""

    start: float
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk that brought tokens
    chunk_tokens: list[int] = field(default_factory=list)  # how many each brought (empty: one each, uncounted)
    counted: int = 0  # tokens the server's counts said had come so far
    end: float | None = None
    output_tokens: int | None = None  # from the usage chunk; None: count chunks
    prompt_tokens: int | None = None
    wanted_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None and bool(self.chunk_times)

    @property
    def num_output_tokens(self) -> int:
        return self.output_tokens if self.output_tokens is not None else len(self.chunk_times)

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.start

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def itls(self) -> list[float]:
        tokens = self.chunk_tokens or [1] * len(self.chunk_times)
        return [(b - a) / k for a, b, k in zip(self.chunk_times, self.chunk_times[1:], tokens[1:]) for _ in range(k)]

    @property
    def tpot(self) -> float | None:
        n = self.num_output_tokens
        return (self.e2e - self.ttft) / (n - 1) if n > 1 else None


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def describe_ms(values: list[float]) -> dict:
    """mean / p50 / p99 of seconds, in milliseconds (None, valid JSON, when there is nothing to describe)."""
    if not values:
        return {"mean": None, "p50": None, "p99": None}
    return {
        "mean": 1000.0 * sum(values) / len(values),
        "p50": 1000.0 * percentile(values, 50),
        "p99": 1000.0 * percentile(values, 99),
    }


def summarize(records: list[RequestRecord], duration: float) -> dict:
    """Throughput over the wall-clock `duration` of the run, and the latency distributions."""
    done = [r for r in records if r.ok]
    output_tokens = sum(r.num_output_tokens for r in done)
    itls = [gap for r in done for gap in r.itls]
    tpots = [t for t in (r.tpot for r in done) if t is not None]
    return {
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration_s": duration,
        "total_output_tokens": output_tokens,
        "total_prompt_tokens": sum(r.prompt_tokens or 0 for r in done),
        "request_throughput": len(done) / duration if duration > 0 else None,
        "output_throughput": output_tokens / duration if duration > 0 else None,
        "ttft_ms": describe_ms([r.ttft for r in done]),
        "tpot_ms": describe_ms(tpots),
        "itl_ms": describe_ms(itls),
        "e2e_ms": describe_ms([r.e2e for r in done]),
        "errors": sorted({r.error for r in records if r.error})[:5],
    }


def per_request(records: list[RequestRecord]) -> list[dict]:
    """The raw numbers behind a summary, kept in the result JSON for plots and later analysis."""
    rows = []
    for r in records:
        row = {"ok": r.ok, "output_tokens": r.num_output_tokens, "wanted_tokens": r.wanted_tokens, "error": r.error}
        if r.ok:
            row.update(ttft_s=r.ttft, e2e_s=r.e2e, tpot_s=r.tpot, itl_s=r.itls)
        rows.append(row)
    return rows
