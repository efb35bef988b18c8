"""Where an engine client stands, and the model facts it serves: what the web side may ask of
either client (the in-process EngineThread, the scale-out RemoteEngine; serving/engine_client.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .prompt import token_limit


class EngineState(StrEnum):
    """A StrEnum, so each state equals its value: /health, /stats and the workers' heartbeats
    carry the same strings as before the enum existed."""

    NEW = "new"  # built, not started
    LOADING = "loading"  # the model is loading (remote: no worker ready yet, or no tokenizer)
    READY = "ready"
    RESTARTING = "restarting"  # the loop died and a fresh engine over the same weights is coming
    STOPPING = "stopping"  # a worker draining after SIGTERM (heartbeats only)
    STOPPED = "stopped"
    DEAD = "dead"  # restarts exhausted, or the loading failed
    NO_ENGINE = "no_engine"  # remote: the channel layer is up but no worker answers


@dataclass(frozen=True)
class ModelInfo:
    """The served model as the API needs it: its name, its tokenizer (a request is tokenized with
    the engine's own), its context length, the KV pool's capacity in tokens and the vocabulary
    size (the range of token ids a prompt may hold)."""

    model_name: str | None
    tokenizer: object
    max_model_len: int | None
    kv_capacity_tokens: int | None = None
    vocab_size: int | None = None
    sampling_defaults: dict = field(default_factory=dict)  # the checkpoint's, for fields a request leaves out
    num_slots: int | None = None  # batch slots: the most completions (n) one request can run at once
    pooling: str = "last"  # how embeddings are pooled (layers/pooling.py)
    hidden_size: int | None = None  # an embedding's length
    matryoshka_dimensions: list[int] | None = None  # lengths an embedding may be cut to ([]: any); None: none
    architecture: str | None = None  # the family and its attention (LLMEngine.architecture)
    weights: str | None = None  # the weights' and KV cache's formats as they run (LLMEngine.weights)

    @property
    def token_limit(self) -> int | None:
        """The most tokens one request may hold, prompt and completion together."""
        return token_limit(self.max_model_len, self.kv_capacity_tokens)

    # A worker sends its ModelInfo whole, but the tokenizer: the web side loads its own copy.
    WIRE_FIELDS = ("model_name", "max_model_len", "kv_capacity_tokens", "vocab_size", "sampling_defaults", "num_slots")
    WIRE_FIELDS += ("pooling", "hidden_size", "matryoshka_dimensions", "architecture", "weights")

    def to_wire(self) -> dict:
        return {name: getattr(self, name) for name in self.WIRE_FIELDS}

    @classmethod
    def of_fleet(cls, wired: list[dict], tokenizer) -> ModelInfo:
        """What a fleet of workers serving one model offers every request: the smallest context,
        pool and batch among them (a request may land on any of them)."""

        def smallest(name: str):
            values = [info.get(name) for info in wired if info.get(name)]
            return min(values) if values else None

        first = wired[0]
        return cls(
            model_name=first.get("model_name"),
            tokenizer=tokenizer,
            max_model_len=smallest("max_model_len"),
            kv_capacity_tokens=smallest("kv_capacity_tokens"),
            vocab_size=first.get("vocab_size"),
            sampling_defaults=first.get("sampling_defaults") or {},
            num_slots=smallest("num_slots"),
            pooling=first.get("pooling") or "last",
            hidden_size=first.get("hidden_size"),
            matryoshka_dimensions=first.get("matryoshka_dimensions"),
            architecture=first.get("architecture"),
            weights=first.get("weights"),
        )
