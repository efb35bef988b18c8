"""Building a model without its random initialisation: every weight is overwritten by the checkpoint.

nn.Linear and nn.Embedding fill their weights with random values when constructed. The loader
replaces all of them, so the filling only costs time (~135M random numbers for SmolLM2) and, on
the meta device, memory: meta tensors' `normal_` runs through torch's Python decompositions,
whose first call imports torch._dynamo (~70 MB resident, docs/performance-log.md section 38).
"""

from __future__ import annotations

from torch import nn
from torch.overrides import TorchFunctionMode


class WithoutWeightInit(TorchFunctionMode):
    """`with WithoutWeightInit(): model = Model(config)` leaves parameters as allocated.

    Each torch.nn.init function asks the active function modes first (its has_torch_function
    check); this mode answers with the tensor untouched and passes every other call through.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == nn.init.__name__ and func.__name__.endswith("_"):
            return kwargs.get("tensor", args[0] if args else None)
        return func(*args, **kwargs)
