"""Looking up sweep entries (one dict per measured configuration) by their fields."""

from __future__ import annotations

import math


def pick(entries: list[dict], **fields) -> dict | None:
    for entry in entries:
        if all(entry.get(k) == v for k, v in fields.items()):
            return entry
    return None


def baseline(entries: list[dict], workload: str, concurrency: int, dtype: str) -> dict | None:
    """HF at this concurrency: the static batch, or one-at-a-time where concurrency is 1."""
    mode = "one-at-a-time" if concurrency == 1 else "static"
    conc = 1 if concurrency == 1 else concurrency
    return pick(entries, backend="hf", workload=workload, concurrency=conc, dtype=dtype, mode=mode)


def _number(value) -> float:
    return math.nan if value is None else float(value)


def throughput(entry: dict | None) -> float:
    return _number(entry["summary"]["output_throughput"]) if entry else math.nan


def metric(entry: dict | None, name: str, stat: str) -> float:
    """A latency statistic in ms; NaN where absent, so tables print a dash and plots leave a gap."""
    return _number(entry["summary"][name][stat]) if entry else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan
