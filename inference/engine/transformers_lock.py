"""One thread at a time in transformers, for everything of ours that imports it or calls into it.

transformers' modules import one another in cycles (`transformers/__init__` -> `utils` ->
`dependency_versions_check` -> `utils`), which Python's import system completes only within one
thread: when two threads import it at once, one is handed the other's partially initialised module
and fails ("cannot import name 'is_tokenizers_available' from partially initialized module
'transformers.utils'"), surfacing as `cannot import name 'AutoModelForCausalLM' from
'transformers'`. A GGUF's cached tokenizer is read on a background thread (gguf/checkpoint.py)
while the loader goes on, so any start that reached transformers' reader in that window failed: every
start of such a file after its first (issue 70). Calls into transformers import more as they run
(`from_pretrained` imports the family's module), so the lock covers the call, not only the import
statement; it is re-entrant, so code holding it may call code that takes it again.
"""

from __future__ import annotations

import threading

TRANSFORMERS_LOCK = threading.RLock()
