"""Errors the engine raises to its callers; the serving layer maps each to an HTTP status."""

from .sampling_params import SamplingParamsError  # noqa: F401  (re-exported: one place to import errors from)


class EngineNotReadyError(RuntimeError):
    """The model is still loading, or the engine loop has died."""


class QueueFullError(RuntimeError):
    """The waiting queue is at its bound; the caller should retry later."""


class PromptTooLongError(ValueError):
    """Prompt tokens plus max_tokens exceed the model's context length."""

    def __init__(self, prompt_tokens: int, max_tokens: int, max_model_len: int):
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.max_model_len = max_model_len
        super().__init__(
            f"This model's maximum context length is {max_model_len} tokens, but the request asks for "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} for the completion)."
        )


class UnsupportedModelError(ValueError):
    """The checkpoint's architecture is not one our model code implements."""
