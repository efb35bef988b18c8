"""A GGUF's packed weights kept on disk beside its cached config, and mapped at later starts.

Packing a 1.5B Q4_K_M (gguf/weights.py) reads the whole file and writes ~1 GB of fresh memory:
1-2.5 s of a start, most of it the kernel faulting in and zeroing new pages (more in a VM whose
memory the host has not backed yet). The packed bytes depend only on the file and on our packer, so
the first start writes them to a `packed-<key>.bin` in the file's cache folder (after the load, on a
thread) and every later start maps that file: no packing, no fresh memory, and the pages are the
page cache's, shared by every process serving the file. A cold page cache reads as many bytes from
disk as the GGUF itself would.

The manifest names what the packing was made of (each weight's tensors, type, row order) and the
kernels' source hash, so a new packer or another model layout never maps stale bytes; a damaged or
short file is packed again. MINIVLLM_PACKED_CACHE=0 packs at every start and writes nothing: the
cache costs about the GGUF's size on disk again.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import mmap
import os
import shutil
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from ..kernels import source_hash
from .checkpoint import populate

log = logging.getLogger("minivllm.engine")

ALIGNMENT = 4096  # each weight starts on a page: the kernels' loads are aligned as torch's allocator would give
HUGE_PAGE = 2 << 20
MANIFEST_NAME = "packed.json"
STALE_TEMPORARY_S = 24 * 3600
_writes: list[threading.Thread] = []


def spec_key(names: list[str], columns: int, kind: str, order: torch.Tensor | None) -> list:
    """What one packed weight is made of, as the manifest records it."""
    order_hash = hashlib.sha256(order.numpy().tobytes()).hexdigest()[:16] if order is not None else None
    return [names, columns, kind, order_hash]


class PackedCache:
    """The packed weights of one GGUF for one list of weights (`keys`), in a folder beside the file's
    cached config (its own: that folder is renamed into place whole). The data file is named by its
    key, so a manifest always names bytes of its own key, whichever writer came last."""

    def __init__(self, config_cache: Path, source: str, keys: list[list]):
        """`config_cache`: the file's cache folder as its open found it (gguf_checkpoint.cache_dir)."""
        self.source = os.path.realpath(source)  # as cache_dir keys it: links to one file share its cache
        self.folder = config_cache.with_name(config_cache.name + "-packed")
        self.key = hashlib.sha256(json.dumps([source_hash(), keys]).encode()).hexdigest()
        self.file_name = f"packed-{self.key[:16]}.bin"

    def load(self) -> list[torch.Tensor] | None:
        """The weights mapped from the file, or None where there is no cache for exactly these weights."""
        try:
            manifest = json.loads((self.folder / MANIFEST_NAME).read_text())
            if manifest.get("key") != self.key:
                return None
            with open(self.folder / self.file_name, "rb") as file:
                if os.fstat(file.fileno()).st_size != manifest["bytes"]:
                    return None
                # read-only: mlock (below) write-faults every page of a writable private map to break its
                # copy-on-write, which copied the weights into anonymous 4 KB pages (their 2 MB mapping split)
                mapped = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            populate(mapped, huge=True)  # one call, and in 2 MB pages where the page cache holds (or reads) them so
            data = np.frombuffer(mapped, dtype=np.uint8)
            with warnings.catch_warnings():  # torch warns of a read-only buffer; nothing writes the weights
                warnings.simplefilter("ignore", UserWarning)
                weights = [
                    torch.from_numpy(data[offset : offset + rows * width]).view(rows, width)
                    for rows, width, offset in manifest["tensors"]
                ]
            huge = _huge_mapped_bytes(data.ctypes.data)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError):
            return None
        in_huge_pages = huge >= 0.9 * len(data)
        if in_huge_pages and _lock(data):
            return weights
        # In 4 KB pages a decode step's page walks cost ~30% of one stream's speed (57 against 44 ms a
        # token, 1.5B Q4_K_M); unlocked, the pages are clean page cache that reclaim may take back (this
        # VM's DAMON pageout did, between requests) and a step then reads them from disk. Copied into
        # memory of 2 MB pages instead, as packing would have.
        log.info(
            "packed weights: %.0f of %.0f MB in 2 MB pages of the page cache%s; copied to memory",
            huge / 2**20,
            len(data) / 2**20,
            ", not lockable (RLIMIT_MEMLOCK)" if in_huge_pages else "",
        )
        copies = [weight.clone() for weight in weights]
        del weights, data
        try:
            mapped.close()
        except BufferError:  # a view still alive somewhere: the pages stay mapped and cannot be dropped
            return copies
        _drop_from_page_cache(self.folder / self.file_name)  # the next start reads it back in 2 MB folios
        return copies

    def save_later(self, packed: list[torch.Tensor]) -> None:
        """Writes the weights on a thread (a whole file, then renamed in: a reader sees none or all)."""
        # not a daemon: a process that stops right after its start finishes the file rather than leave half of one
        thread = threading.Thread(target=self._save, args=(packed,), name="packed-cache-write")
        _writes.append(thread)
        thread.start()

    def _save(self, packed: list[torch.Tensor]) -> None:
        try:  # this thread only: the server is taking requests while ~1 GB is copied out
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        partial = self.folder / f"{self.file_name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            entries, offset = [], 0
            for tensor in packed:
                entries.append([*tensor.shape, offset])
                offset = (offset + tensor.numel() + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
            with open(partial, "xb") as file:
                _write_in_huge_pages(file, [tensor.contiguous().numpy().reshape(-1) for tensor in packed], entries, offset)
                file.flush()
                os.fsync(file.fileno())
            partial.replace(self.folder / self.file_name)
            manifest = {"key": self.key, "source": self.source, "bytes": offset, "tensors": entries}
            written = self.folder / f"{MANIFEST_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
            written.write_text(json.dumps(manifest))
            written.replace(self.folder / MANIFEST_NAME)
            self._remove_stale()
            log.info("packed weights cached for the next start: %s (%.0f MB)", self.folder / self.file_name, offset / 2**20)
        except OSError as error:  # a full or read-only disk: later starts pack again
            log.warning("could not cache the packed weights in %s: %s", self.folder, error)
            partial.unlink(missing_ok=True)

    def _remove_stale(self) -> None:
        """What an earlier packer or an earlier version of this file left (each about a model's size of
        disk): other data files in this folder, temporary files over a day old (a process killed while
        writing), and the packed folders of this same path's earlier contents. A mapped file stays
        readable to whoever maps it until they unmap it."""
        for path in self.folder.iterdir():
            old_temporary = path.suffix == ".tmp" and time.time() - path.stat().st_mtime > STALE_TEMPORARY_S
            if (path.suffix == ".bin" and path.name != self.file_name) or old_temporary:
                path.unlink(missing_ok=True)
        for manifest_path in self.folder.parent.glob(f"*-packed/{MANIFEST_NAME}"):
            folder = manifest_path.parent
            try:
                source = json.loads(manifest_path.read_text()).get("source")
            except (OSError, ValueError):
                continue
            if folder != self.folder and source == self.source:
                shutil.rmtree(folder, ignore_errors=True)


def _write_in_huge_pages(file, arrays: list[np.ndarray], entries: list[list[int]], size: int) -> None:
    """The file written one whole 2 MB page at a time: a file system with large folios (ext4 on Linux
    6.16+, xfs) then keeps it in the page cache as 2 MB folios, which the next start maps as 2 MB pages."""
    stage = np.empty(HUGE_PAGE, dtype=np.uint8)
    for start in range(0, size, HUGE_PAGE):
        end = min(start + HUGE_PAGE, size)
        chunk = stage[: end - start]
        chunk.fill(0)  # the padding between weights
        for array, (_, _, offset) in zip(arrays, entries):
            lo, hi = max(start, offset), min(end, offset + array.size)
            if lo < hi:
                chunk[lo - start : hi - start] = array[lo - offset : hi - offset]
        file.write(memoryview(chunk))


def _lock(data: np.ndarray) -> bool:
    """Keeps the mapped weights resident (mlock), as memory of our own is without swap. False where the
    process may not lock that much (RLIMIT_MEMLOCK, often 8 MB, without CAP_IPC_LOCK)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.mlock(ctypes.c_void_p(data.ctypes.data), ctypes.c_size_t(len(data))) == 0
    except (OSError, AttributeError):
        return False


def _drop_from_page_cache(path: Path) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    except (OSError, AttributeError):
        pass


def _huge_mapped_bytes(address: int) -> int:
    """How many bytes of the mapping at `address` are mapped as 2 MB pages of a file (FilePmdMapped);
    0 where /proc does not say (then the weights are copied: slower to start, never slower to run)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(bound, 16) for bound in head.split("-"))
                inside = low <= address < high
            elif inside and head == "FilePmdMapped:":
                return int(line.split()[1]) * 1024
    return 0


def wait_for_writes(timeout: float | None = None) -> None:
    """Until every cache write this process started has finished (tests, and a clean shutdown)."""
    for thread in list(_writes):
        thread.join(timeout)
