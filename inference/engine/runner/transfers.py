"""The step's traffic between host and device, without stalls.

On CUDA, `torch.tensor(list, device="cuda")`, `.tolist()`, `.item()` and `bool(tensor)` each
make the host wait for the device; a step that did that a dozen times left the GPU idle between
its pieces. Here every host value a step needs goes up through page-locked memory with a
non-blocking copy (`to_device`), queued behind the work already on the stream, and everything the
host needs back comes down in one copy (`fetch`): one synchronisation per step. On the CPU both
are plain tensor calls.

Page-locked buffers come from torch's caching host allocator, which keeps them across steps and
does not hand one out again until the copy that read it has finished.
"""

from __future__ import annotations

import torch


def to_device(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A list (or nested lists) of host values as a tensor on `device`, copied without waiting."""
    if device.type == "cpu":
        return torch.tensor(values, dtype=dtype)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def tensor_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor (a grammar's mask) on `device`, copied without waiting."""
    if device.type == "cpu" or tensor.device == device:
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def fetch(*tensors: torch.Tensor) -> list[list]:
    """Each tensor's values as (nested) lists, through one device-to-host copy: the step's one
    synchronisation. The tensors are joined as float64 on the device, which holds token ids
    (below 2^53) and float32 logprobs exactly; integer tensors come back as ints."""
    flat = [t.reshape(-1) for t in tensors]
    joined = flat[0] if len(flat) == 1 else torch.cat([f.to(torch.float64) for f in flat])
    values = joined.tolist()
    out, start = [], 0
    for tensor, part in zip(tensors, flat):
        chunk = values[start : start + part.numel()]
        start += part.numel()
        if not tensor.is_floating_point():
            chunk = [int(v) for v in chunk]
        if tensor.dim() == 2:
            width = tensor.shape[1]
            chunk = [chunk[i : i + width] for i in range(0, len(chunk), width)]
        out.append(chunk)
    return out
