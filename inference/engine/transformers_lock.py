"""One thread at a time importing transformers' modules: every first import of ours, and the calls
that import more as they run (the loaders').

transformers' modules import one another in cycles (`transformers/__init__` -> `utils` ->
`dependency_versions_check` -> `utils`), which Python's import system completes only within one
thread: when two threads import it at once, one is handed the other's partially initialised module
and fails ("cannot import name 'is_tokenizers_available' from partially initialized module
'transformers.utils'"), surfacing as `cannot import name 'AutoModelForCausalLM' from
'transformers'`. A GGUF's cached tokenizer is read on a background thread (gguf/checkpoint.py)
while the loader goes on, so any start that reached transformers' reader in that window failed: every
start of such a file after its first (issue 70). Calls into transformers import more as they run
(`from_pretrained` imports the family's module), so the lock covers the loaders' calls, not only
their import statements; it is re-entrant, so code holding it may call code that takes it again.
A load may hold it for minutes (transformers' reader): code on a request's path imports through
`imported`, which takes the lock only for a module not imported yet (by then a loaded model's
tokenizer has imported transformers), never waiting on a load to reach a module already there.
"""

from __future__ import annotations

import importlib
import sys
import threading

TRANSFORMERS_LOCK = threading.RLock()


def imported(module: str):
    """`module`, imported under the lock where it is not imported yet."""
    loaded = sys.modules.get(module)
    if loaded is not None and not getattr(getattr(loaded, "__spec__", None), "_initializing", False):
        return loaded
    with TRANSFORMERS_LOCK:
        return importlib.import_module(module)
