"""glibc's malloc told to keep a step's big buffers, so each step does not fault them in afresh.

A step allocates and frees the same large tensors every time: the logits above all (32 rows of
Gemma 3's 262,144-token vocabulary are 32 MiB). glibc serves a request at or above its mmap
threshold with a fresh mapping and unmaps it on free; the threshold grows to a freed chunk's size,
but only up to 32 MiB, so at 32 rows those logits were mapped, faulted in page by page and zeroed
by the kernel at every step (`clear_page_erms` among the top symbols of a `perf` sample, Zen 4).
Fixed thresholds of 64 MiB serve such buffers from the heap and keep up to 64 MiB freed at its top
for the next step: measured, Gemma 3's 32-client engine step 71-76 -> 61-70 ms (alternating runs). A process-wide setting, made once
by the first CPU model runner; elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import platform

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
STEP_BUFFER_BYTES = 64 * 2**20


@functools.cache
def keep_step_buffers() -> bool:
    """Sets glibc's mmap and trim thresholds to STEP_BUFFER_BYTES; whether it could."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    # each option on its own: an older glibc refuses an mmap threshold above 32 MiB (half its heap size)
    done = [mallopt(option, STEP_BUFFER_BYTES) == 1 for option in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD)]
    log.debug("malloc thresholds %s MiB: mmap %s, trim %s", STEP_BUFFER_BYTES >> 20, *("set" if d else "refused" for d in done))
    return all(done)
