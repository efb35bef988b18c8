"""EngineClient: what the web side may ask of an engine, whichever process runs it.

Two classes implement it: the in-process EngineThread (engine/engine_thread.py) and the
scale-out RemoteEngine (serving/remote/client.py), which reaches `runengine` workers over the
channel layer. Views, jobs, selectors and the lifecycle use only these members (through
runtime.get_engine_client()), so either client serves them; a test holds both to this declaration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ..engine.config import EngineConfig
from ..engine.engine_state import EngineState, ModelInfo
from ..engine.engine_stats import EngineStats
from ..engine.request_streams import RequestStream
from ..engine.sample.sampling_params import SamplingParams


@runtime_checkable
class EngineClient(Protocol):
    config: EngineConfig

    @property
    def state(self) -> EngineState: ...

    @property
    def ready(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def model_info(self) -> ModelInfo | None:
        """The served model's name, tokenizer, context length and KV capacity; None until ready."""

    @property
    def max_queue(self) -> int: ...

    def start(self) -> EngineClient: ...

    def wait_ready(self, timeout: float | None = None) -> bool: ...

    def submit(self, request_id: str, token_ids: list[int], params: SamplingParams, resume: list | None = None) -> RequestStream:
        """Queues a prompt of token ids already checked against model_info (serving/submission.py);
        EngineNotReadyError or QueueFullError when it cannot be. Its outputs arrive on the returned
        async stream, the last one finished. `resume`: another engine died serving it, having
        delivered these tokens per completion (engine/resume.py); it carries on from there."""

    def compile_grammar(self, spec: dict) -> None:
        """Compiles a request's grammar (SamplingParams.structured) off the engine loop, before it is
        queued; GrammarError naming the field when it cannot constrain decoding."""

    def abort(self, request_id: str) -> None: ...

    def num_waiting(self) -> int: ...

    def num_in_flight(self) -> int:
        """Requests submitted whose streams have not ended: a model with any is never unloaded."""

    def stats(self) -> EngineStats:
        """The latest snapshot (a fleet's: summed over its ready workers)."""

    def not_ready_reason(self) -> str: ...

    def inject_fault(self, kind: str, hook: Callable[[], None]) -> None:
        """Tests only (engine/fault_hooks.py, serving/fault_injection.py): `hook` runs, and may
        raise, in the next model steps ("step"), in the engine loop ("loop"), or before a restart
        builds its engine ("restart"); NotImplementedError where the engine runs in another process."""

    def shutdown(self, timeout: float = 10.0) -> None:
        """Ends every in-flight request with a final `abort` output, then stops."""
