"""The request path's Prometheus instruments: per-request histograms and counters, observed in
this web process (jobs.py when a request ends, submission.py when it is queued). The /metrics view
and the engine-wide collector are HTTP's (api/metrics.py); both share one dedicated `REGISTRY`
(not prometheus_client's global one), so module reloads and tests never collide with other
registrations.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

PREFIX = "minivllm:"
REGISTRY = CollectorRegistry()

# `_created` series would add a timestamp gauge per counter and histogram (twice the families in
# the text format) that no dashboard reads. This is process-wide; we are prometheus_client's only user.
disable_created_metrics()

# vLLM's bucket choices (seconds)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM sizes these by max_model_len; the model is
    not known at import time, so a generous fixed ceiling stands in)."""
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


TOKEN_BUCKETS = build_1_2_5_buckets(200_000)


def _histogram(name: str, doc: str, buckets) -> Histogram:
    return Histogram(PREFIX + name, doc, ["model_name"], buckets=buckets, registry=REGISTRY)


# Counter names omit `_total`: prometheus_client appends it (and a `_created` sample).
REQUEST_SUCCESS = Counter(
    PREFIX + "request_success", "Finished requests, by finish reason.", ["model_name", "finished_reason"], registry=REGISTRY
)
TIME_TO_FIRST_TOKEN = _histogram("time_to_first_token_seconds", "Arrival to first generated token.", TTFT_BUCKETS)
INTER_TOKEN_LATENCY = _histogram("inter_token_latency_seconds", "Gap between successive token outputs of a request.", ITL_BUCKETS)
E2E_REQUEST_LATENCY = _histogram("e2e_request_latency_seconds", "Arrival to finish.", REQUEST_LATENCY_BUCKETS)
REQUEST_QUEUE_TIME = _histogram("request_queue_time_seconds", "Arrival to first batch slot.", REQUEST_LATENCY_BUCKETS)
REQUEST_PROMPT_TOKENS = _histogram("request_prompt_tokens", "Prompt length of finished requests.", TOKEN_BUCKETS)
API_REQUESTS = Counter(
    PREFIX + "api_requests",
    "Engine requests submitted (taken or refused; one per prompt or input of a batch), by the API they came by.",
    ["model_name", "api"],
    registry=REGISTRY,
)
STRUCTURED_REQUESTS = Counter(
    PREFIX + "structured_requests", "Requests with constrained decoding, by kind.", ["model_name", "kind"], registry=REGISTRY
)
GRAMMAR_COMPILE_TIME = _histogram(
    "grammar_compile_seconds", "Compiling a request's grammar before it is queued (cached: near 0).", TTFT_BUCKETS
)
REQUEST_GENERATION_TOKENS = _histogram("request_generation_tokens", "Generated tokens of finished requests.", TOKEN_BUCKETS)


class RequestMetrics:
    """One request's observations: token gaps while it streams, the rest once when it ends."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self._last_token_at: dict[int, float] = {}  # by choice: n completions stream side by side
        self._inter_token = INTER_TOKEN_LATENCY.labels(model_name)  # looked up once: on_tokens runs per token

    def on_tokens(self, now: float, choice: int = 0, count: int = 1) -> None:
        """An output carrying `count` tokens reached this process; the gap since its choice's
        previous one, shared by its tokens (a verification writes several at once), is the ITL of each."""
        last = self._last_token_at.get(choice)
        if last is not None:
            gap = max(0.0, now - last) / count
            for _ in range(count):
                self._inter_token.observe(gap)
        self._last_token_at[choice] = now

    def on_finish(
        self,
        *,
        finish_reason: str,
        prompt_tokens: int,
        completion_tokens: int,
        queue_time: float | None,
        time_to_first_token: float | None,
        latency: float,
    ) -> None:
        model = self.model_name
        REQUEST_SUCCESS.labels(model, finish_reason).inc()
        E2E_REQUEST_LATENCY.labels(model).observe(latency)
        REQUEST_GENERATION_TOKENS.labels(model).observe(completion_tokens)
        if prompt_tokens:  # unknown when the request ended before the engine answered
            REQUEST_PROMPT_TOKENS.labels(model).observe(prompt_tokens)
        if queue_time is not None:
            REQUEST_QUEUE_TIME.labels(model).observe(queue_time)
        if time_to_first_token is not None:
            TIME_TO_FIRST_TOKEN.labels(model).observe(time_to_first_token)
