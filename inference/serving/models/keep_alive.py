"""How long a model stays loaded once idle: Ollama's `keep_alive` (seconds, or a Go duration such as
"5m" or "1h30m"; negative: forever; 0: unload as soon as its last request ends), for the
MINIVLLM_KEEP_ALIVE setting and every request that names one."""

from __future__ import annotations

import re

FOREVER = -1.0
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")  # Go's time.ParseDuration units
SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_keep_alive(value) -> float | None:
    """Seconds (negative: forever) from a number, a numeric string or a Go duration; None for None.
    ValueError names what is accepted."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = value.strip() if isinstance(value, str) else ""
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text)
    if re.fullmatch(r"\d+(?:\.\d+)?", body):
        return sign * float(body)
    parts = DURATION_PART.findall(body)
    if not body or not parts or "".join(number + unit for number, unit in parts) != body:
        raise ValueError("keep_alive must be a number of seconds or a duration such as 5m or 1h30m")
    return sign * sum(float(number) * SCALE[unit] for number, unit in parts)
