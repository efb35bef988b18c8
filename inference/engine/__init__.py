"""The engine: plain Python + PyTorch, never imports Django.

One process-wide setting lives here, because it must come before torch's first allocation and
every entry point imports this package before it builds a tensor: torch's CPU allocator gives
allocations of 2 MB and more transparent huge pages when THP_MEM_ALLOC_ENABLE is set (read once,
at the first allocation). A decode step streams every weight from memory, and 4 KB pages add a
page walk and a prefetcher restart every 4 KB: on a Zen 4 EPYC one pass over the int8 layers'
weights took 5.15 ms against 5.5 (medians of six alternating runs; docs/performance.md, section
27). Set THP_MEM_ALLOC_ENABLE=0 to opt out; where the kernel's THP mode is "never" it does nothing.
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
