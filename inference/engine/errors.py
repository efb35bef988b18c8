"""Errors the engine raises to its callers; the serving layer maps each to an HTTP status."""

import torch

from .sample.sampling_params import SamplingParamsError  # noqa: F401  (re-exported: one place to import errors from)

# What CUDA's sticky errors say: after one of these the context is unusable and every later kernel fails too.
STICKY_DEVICE_ERRORS = (
    "CUDA error",
    "device-side assert",
    "illegal memory access",
    "illegal address",
    "unspecified launch failure",
    "CUBLAS_STATUS_",
    "CUDNN_STATUS_",
)


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


class FatalDeviceError(RuntimeError):
    """The device failed in a way no later step survives (a device-side assert, an illegal memory
    access): the engine ends (state dead, /health 503, `runengine` exits 1 for its orchestrator to
    restart) rather than fail every request that follows while looking healthy."""


def is_fatal_device_error(exc: BaseException) -> bool:
    """Whether `exc` leaves the device unusable. Running out of memory does not: that step's
    requests fail and the engine goes on."""
    if isinstance(exc, FatalDeviceError):
        return True
    if isinstance(exc, torch.OutOfMemoryError):
        return False
    if isinstance(exc, getattr(torch, "AcceleratorError", ())):
        return True
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in STICKY_DEVICE_ERRORS)
