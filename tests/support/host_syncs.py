"""Counts, on the CPU, the calls that would make the host wait for a GPU: a value brought to the
host (`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `bool()` / `int()` / `float()` of a tensor), a
tensor made from host data straight on a device (`torch.tensor(..., device=...)`), a blocking
`.to(device)`, and a Python list used as an index (copied to the device with a wait). The engine's
torch path is the one CUDA runs, so what trips here would stall a GPU there."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_TO_HOST = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__bool__: "bool",
    torch.Tensor.__int__: "int",
    torch.Tensor.__float__: "float",
}
_FROM_HOST_DATA = {torch.tensor: "torch.tensor(device=)", torch.as_tensor: "torch.as_tensor(device=)"}
_INDEXING = {torch.Tensor.__getitem__: "list index", torch.Tensor.__setitem__: "list index"}


def _names_a_device(args, kwargs) -> bool:
    return kwargs.get("device") is not None or any(isinstance(a, (torch.device, str)) for a in args[1:])


def _has_list(index) -> bool:
    return isinstance(index, list) or (isinstance(index, tuple) and any(isinstance(i, list) for i in index))


class HostSyncCounter(TorchFunctionMode):
    """`with HostSyncCounter() as syncs:` ... `syncs.events` names each would-be wait, in order."""

    def __init__(self):
        super().__init__()
        self.events: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _TO_HOST:
            self.events.append(_TO_HOST[func])
        elif func in _FROM_HOST_DATA and kwargs.get("device") is not None:
            self.events.append(_FROM_HOST_DATA[func])
        elif func is torch.Tensor.to and _names_a_device(args, kwargs) and not kwargs.get("non_blocking", False):
            self.events.append("blocking .to(device)")
        elif func in _INDEXING and _has_list(args[1]):
            self.events.append(_INDEXING[func])
        return func(*args, **kwargs)
