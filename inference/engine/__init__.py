"""The engine: plain Python + PyTorch, never imports Django.

Two process-wide settings live here, because they must come before torch's first allocation (and
oneDNN's first primitive) and every entry point imports this package before it builds a tensor.

oneDNN is capped at AVX512-BF16 (ONEDNN_MAX_CPU_ISA): on a Xeon with AMX its bf16 GEMM takes AMX
tiles from 8-16 rows up and sums in another order there, so `MINIVLLM_QUANT=bf16` gave a row other
bits in a batch of 16 than alone (the lone-row pairing of layers/linear/packed.py covers only one
row). Capped, every row count sums alike; batching must never change a request's output. Our own
AMX kernel (int8) is ours, not oneDNN's, and keeps its tiles. Set ONEDNN_MAX_CPU_ISA to opt out.

And torch's CPU allocator gives allocations of 2 MB and more transparent huge pages when
THP_MEM_ALLOC_ENABLE is set (read once, at the first allocation). A decode step streams every weight from memory, and 4 KB pages add a
page walk and a prefetcher restart every 4 KB: on a Zen 4 EPYC one pass over the int8 layers'
weights took 5.15 ms against 5.5 (medians of six alternating runs; docs/performance-log.md, section
27). Set THP_MEM_ALLOC_ENABLE=0 to opt out; where the kernel's THP mode is "never" it does nothing.
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
