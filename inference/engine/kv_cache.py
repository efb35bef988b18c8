"""The KV block pool and the BlockManager that hands its blocks to sequences.

Blocks are reference-counted so two sequences with the same prompt prefix share them.
A full block is named by a hash chained over every token up to its end, so equal hashes
mean equal prefixes. A freed block keeps its hash and stays findable until it is reused
(least recently freed first), which is what makes a repeated system prompt free.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass

import psutil
import torch

from .sequence import Sequence

MB = 1024 * 1024


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()  # kept for cached blocks so a hash collision can't return wrong K/V


def chain_hash(previous: int | None, token_ids: tuple[int, ...]) -> int:
    return hash((previous, token_ids))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_uncached: deque[int] = deque(range(num_blocks))
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # LRU order: oldest first
        self.hash_to_block: dict[int, int] = {}
        self.prefix_queries = 0  # full prompt blocks looked up
        self.prefix_hits = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_uncached) + len(self.free_cached)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives `seq` enough blocks to hold `num_new_tokens` more computed tokens."""
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self._take_free_block())

    def reuse_cached_prefix(self, seq: Sequence) -> None:
        """Attaches cached blocks matching the start of a fresh sequence's tokens.

        At least one token is always left to compute: the step needs its logits.
        """
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching:
            return
        full_blocks = (len(seq.token_ids) - 1) // self.block_size
        previous = None
        for index in range(full_blocks):
            tokens = self._block_tokens(seq, index)
            block_hash = chain_hash(previous, tokens)
            self.prefix_queries += 1
            block_id = self.hash_to_block.get(block_hash)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            self.prefix_hits += 1
            self._acquire(block_id)
            seq.block_table.append(block_id)
            seq.block_hashes.append(block_hash)
            previous = block_hash
        seq.num_computed_tokens = len(seq.block_table) * self.block_size
        seq.num_cached_prompt_tokens = seq.num_computed_tokens

    def register_computed_blocks(self, seq: Sequence) -> None:
        """After a step, names each block that just became full so later requests can reuse it."""
        if not self.enable_prefix_caching:
            return
        full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        while len(seq.block_hashes) < full:
            index = len(seq.block_hashes)
            tokens = self._block_tokens(seq, index)
            previous = seq.block_hashes[-1] if seq.block_hashes else None
            block_hash = chain_hash(previous, tokens)
            seq.block_hashes.append(block_hash)
            block = self.blocks[seq.block_table[index]]
            if block.hash is None and block_hash not in self.hash_to_block:
                block.hash, block.token_ids = block_hash, tokens
                self.hash_to_block[block_hash] = block.block_id

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):  # tail blocks first: they are the least likely to be shared
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is not None:
                    self.free_cached[block_id] = None
                else:
                    self.free_uncached.append(block_id)
        seq.block_table = []
        seq.block_hashes = []

    def _block_tokens(self, seq: Sequence, index: int) -> tuple[int, ...]:
        return tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])

    def _acquire(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.free_cached.pop(block_id, None)
        block.ref_count += 1

    def _take_free_block(self) -> int:
        if self.free_uncached:
            block_id = self.free_uncached.popleft()
        elif self.free_cached:
            block_id, _ = self.free_cached.popitem(last=False)  # evict the least recently freed
            evicted = self.blocks[block_id]
            if self.hash_to_block.get(evicted.hash) == block_id:
                del self.hash_to_block[evicted.hash]
            evicted.hash, evicted.token_ids = None, ()
        else:
            raise RuntimeError("no free KV blocks")  # the scheduler checks can_grow first
        self.blocks[block_id].ref_count = 1
        return block_id


def bytes_per_block(kv_shape: tuple[int, int, int], block_size: int, dtype: torch.dtype) -> int:
    layers, kv_heads, head_dim = kv_shape
    return 2 * layers * block_size * kv_heads * head_dim * torch.finfo(dtype).bits // 8


# CPU: the KV pool takes this share of the memory available at start, at most KV_CAP_MB, and at
# least one full-context request where memory allows. 1 GB of float32 K/V is 22.7k of SmolLM2's
# tokens: one full 8,192-token context and 32 streams of ~450 (llama-server with -c 32768 keeps
# ~0.75 GB of float16 K/V).
KV_MEMORY_FRACTION = 0.25
KV_CAP_MB = 1024
KV_CEILING_FRACTION = 0.5  # never more than this share of available memory, whatever is asked


def plan_num_blocks(
    kv_shape,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device,
    kv_cache_mb: int | None,
    gpu_fraction: float,
    max_model_len: int = 0,
) -> int:
    """How many blocks fit: MINIVLLM_KV_CACHE_MB on CPU, else planned from available memory (see
    above, never fewer than one `max_model_len` request where memory allows); a share of free
    memory on CUDA; never more than exists. The engine lowers max_model_len to what the pool holds."""
    per_block = bytes_per_block(kv_shape, block_size, dtype)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        budget = int(free * gpu_fraction)
    else:
        available = psutil.virtual_memory().available
        if kv_cache_mb is None:
            full_context = -(-max_model_len // block_size) * per_block
            kv_cache_mb = max(min(int(available * KV_MEMORY_FRACTION), KV_CAP_MB * MB), full_context) // MB + 1
        budget = min(kv_cache_mb * MB, int(available * KV_CEILING_FRACTION))
    num_blocks = budget // per_block
    if num_blocks < 1:
        raise ValueError(f"the KV cache budget ({budget // MB} MB) is smaller than one block ({per_block} bytes)")
    return num_blocks


MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23  # Linux's madvise advice numbers (the latter: 5.14 and later)


def _zero_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The CPU pool as anonymous memory, zero by the kernel's promise: torch.zeros wrote 1 GB of zeros
    before the engine could be ready (~1.3 s on a 2-core EPYC). A background thread then asks the
    kernel to back every page (MADV_POPULATE_WRITE, which writes nothing, so blocks already in use
    keep their K/V), so the resident size settles at the pool's within a second or two instead of
    creeping up as requests first reach each block."""
    nbytes = math.prod(shape) * torch.finfo(dtype).bits // 8
    memory = mmap.mmap(-1, max(nbytes, 1))
    tensor = torch.frombuffer(memory, dtype=dtype).view(shape)  # the tensor keeps the map alive
    address = tensor.data_ptr()
    libc = _libc()
    if libc is not None:
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
    shape = (layers, 2, kv_heads, num_blocks, block_size, head_dim)
    pool = _zero_pages(shape, dtype) if device.type == "cpu" else torch.zeros(shape, dtype=dtype, device=device)
    return [(pool[i, 0], pool[i, 1]) for i in range(layers)]
