"""The cache's tensors: each layer's preallocated K and V, in the full-attention pool or the
sliding-window layers' own pool (memory_plan.py says which), or a recurrent layer's state slots;
and each block pool's addressing (KVGroup)."""

from __future__ import annotations

import ctypes
import math
import mmap
import threading
from dataclasses import dataclass

import torch

from ..runner.block_tables import BlockTables
from .block_pool import FULL, STATE, WINDOW
from .layout import kind_head_shape, kv_sources, layer_kinds

MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23  # Linux's madvise advice numbers (the latter: 5.14 and later)


def _zero_pages(shape: tuple[int, ...], dtype: torch.dtype, populate: bool = True) -> torch.Tensor:
    """The CPU pool as anonymous memory, zero by the kernel's promise: torch.zeros wrote 1 GB of zeros
    before the engine could be ready (~1.3 s on a 2-core EPYC). A background thread then asks the
    kernel to back every page (MADV_POPULATE_WRITE, which writes nothing, so blocks already in use
    keep their K/V), so the resident size settles at the pool's within a second or two instead of
    creeping up as requests first reach each block. `populate=False` (the recurrent states) leaves
    pages unbacked until a row is first written: slots and checkpoints never used cost no memory."""
    nbytes = math.prod(shape) * torch.finfo(dtype).bits // 8
    memory = mmap.mmap(-1, max(nbytes, 1))
    tensor = torch.frombuffer(memory, dtype=dtype).view(shape)  # the tensor keeps the map alive
    address = tensor.data_ptr()
    libc = _libc()
    if libc is not None and populate:
        libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), MADV_HUGEPAGE)
        threading.Thread(
            target=libc.madvise,
            args=(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), MADV_POPULATE_WRITE),
            name="kv-pool-populate",
            daemon=True,
        ).start()
    return tensor


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None


def allocate_kv_pool(kv_shape, num_blocks: int, block_size: int, dtype, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One preallocated K and V tensor per layer, head-major: [kv_heads, num_blocks, block_size, head_dim].

    Head-major because decode attention batches over (kv head, sequence): gathering a
    sequence's blocks out of this layout yields keys already laid out for one batched matmul,
    where a [slots, kv_heads, head_dim] layout needs a transposing copy of every key, every
    layer, every step (measured 2.5x the cost of the attention maths at 32 sequences).
    """
    layers, kv_heads, head_dim = kv_shape
    if layers == 0:  # (a model whose every layer keeps its K/V in the sliding-window pool)
        return []
    shape = (layers, 2, kv_heads, num_blocks, block_size, head_dim)
    pool = _zero_pages(shape, dtype) if device.type == "cpu" else torch.zeros(shape, dtype=dtype, device=device)
    return [(pool[i, 0], pool[i, 1]) for i in range(layers)]


@dataclass
class KVGroup:
    """One pool's addressing: its blocks (one past the coordinator's: a padding or null block),
    each kv head's offset in its head-major layout, and the device copy of its sequences' tables."""

    pool_blocks: int
    block_size: int
    tables: BlockTables
    head_slot_offsets: torch.Tensor
    head_block_offsets: torch.Tensor
    window: int | None = None  # the sliding-window pool's window

    @classmethod
    def create(cls, num_blocks: int, block_size: int, kv_heads: int, device, window: int | None = None) -> KVGroup:
        pool_blocks = num_blocks + 1
        heads = torch.arange(kv_heads, device=device)
        return cls(
            pool_blocks,
            block_size,
            BlockTables(device, windowed=window is not None),
            (heads * pool_blocks * block_size)[:, None],
            (heads * pool_blocks)[:, None, None],
            window,
        )

    def table(self, seq) -> list[int]:
        return seq.window_table if self.window is not None else seq.block_table

    def slot(self, seq, position: int) -> int:
        return self.table(seq)[position // self.block_size] * self.block_size + position % self.block_size

    def first_block(self, position: int) -> int:
        """The first block a query at `position` reads: 0, or its window's first."""
        return 0 if self.window is None else max(0, position - self.window + 1) // self.block_size


def allocate_state_pool(shapes, num_slots: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each recurrent layer's (conv states, recurrent states), float32, one row per state slot:
    `shapes` is the model's (conv, recurrent) shape per recurrent layer (recurrent_state.py). On
    the CPU resident only as rows are first written (a row starts from zeros when its sequence does)."""

    def zeros(shape):
        if torch.device(device).type == "cpu":
            return _zero_pages((num_slots, *shape), torch.float32, populate=False)
        return torch.zeros((num_slots, *shape), dtype=torch.float32, device=device)

    return [(zeros(conv), zeros(rec)) for conv, rec in shapes]


def allocate_layer_caches(model, full: KVGroup, window: KVGroup | None, dtype, device, state_slots: int = 0):
    """Each layer's cache in layer order: a (K, V) pair in its group's pool, or a recurrent layer's
    (conv, recurrent) states; and each layer's kind (a windowed layer is FULL where no window pool is
    kept). A KV-shared layer is given its source layer's tensors: it reads them and writes none."""
    kinds = [FULL if kind == WINDOW and window is None else kind for kind in layer_kinds(model)]
    sources = kv_sources(model)
    if window is None and kind_head_shape(model, FULL) != kind_head_shape(model, WINDOW) and WINDOW in layer_kinds(model):
        raise ValueError("this model's sliding-window layers have their own head shape: they need the window pool")
    caches = {}
    for kind, group in ((FULL, full), (WINDOW, window)):
        layers = [i for i, k in enumerate(kinds) if k == kind and sources[i] == i]
        if group is not None and layers:
            shape = (len(layers), *kind_head_shape(model, WINDOW if group.window is not None else FULL))
            caches.update(zip(layers, allocate_kv_pool(shape, group.pool_blocks, group.block_size, dtype, device)))
    if STATE in kinds:
        states = allocate_state_pool(model.state_shapes(), state_slots, device)
        caches.update(zip([i for i, k in enumerate(kinds) if k == STATE], states))
    return [caches[source] for source in sources], kinds
