"""A GGUF file read for serving: its config, tokenizer and tensor index, cached; the file mapped,
its tensors handed to the kernels as they lie in it.

Why not transformers' GGUF loading alone: it parses the whole file with gguf's Python reader
(2-3 s for SmolLM2, ~8 s a parse for a 150k-token vocabulary), converts the tokenizer (3 s) and
de-quantizes every tensor to float32 (~10 s, 540 MB for SmolLM2), which the engine would then
quantize again. Here the first load parses the config and tokenizer once (transformers) and the
tensor index from the header (our own reader), and keeps them in ~/.cache/minivllm/gguf/; every
later load reads those and maps the file, whose blocks become our packed weights
(gguf/weights.py) with no float32 copy of any of them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import mmap
import os
import shutil
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from ..env import cache_home
from ..kernels import kernels
from ..kv_cache.tensors import MADV_HUGEPAGE
from ..transformers_lock import TRANSFORMERS_LOCK
from .config import fast_gguf_config

log = logging.getLogger("minivllm.engine")

CACHE_ROOT = cache_home() / "gguf"
INDEX_VERSION = 3  # 2: config.json holds every field, defaults included (SavedConfig); 3: and gguf_pooling_type
MADV_POPULATE_READ = 22  # linux/mman.h; Python's mmap module does not name it
GROUPED_TYPES = ("q4_0", "q4_1", "q8_0")  # blocks of 32 weights our grouped kernel takes as they are


@dataclass(frozen=True)
class TensorEntry:
    type: str  # "q4_1", "q8_0", "f32", ...
    shape: tuple[int, ...]  # torch order: [rows, columns] for a matrix
    offset: int  # bytes from the start of the file
    nbytes: int


class GGUFCheckpoint:
    def __init__(self, path: str, hf_config, tokenizer, tensors: dict[str, TensorEntry], cache: Path | None = None):
        """`tokenizer`: the tokenizer, or a Future of it (loading beside the weights' packing); `cache`:
        the file's cache folder as its open found it (what is cached beside it must be of the same file)."""
        self.path = path
        self.cache = cache or cache_dir(path)
        self.hf_config = hf_config
        self._tokenizer = tokenizer
        self.tensors = tensors
        # copy-on-write: torch takes views of it without a copy or a read-only warning; nothing writes it
        with open(path, "rb") as file:
            self._map = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._file = np.frombuffer(self._map, dtype=np.uint8)

    @classmethod
    def open(cls, path: str) -> GGUFCheckpoint:
        """From the cache when it matches the file (its path, size and time), else parsed and cached."""
        cache = cache_dir(path)
        if (cache / "index.json").is_file():
            try:
                config, tensors = _read_cached_config(cache), _read_index(cache)
                # the tokenizer's ~1.5 s (transformers' imports, 150k-token vocabularies) runs while the weights pack
                return cls(path, config, _BACKGROUND.submit(_read_cached_tokenizer, cache, path), tensors, cache)
            except (OSError, ValueError, KeyError) as error:  # a damaged cache: parse again
                log.warning("GGUF cache %s unreadable (%s): reading the file again", cache, error)
        metadata = {}
        tensors, architecture = _parse_index(path, metadata)  # first: a truncated file fails here, in a fraction of a second
        folder, name = os.path.split(os.path.abspath(path))
        with fast_gguf_config(architecture):  # not gguf-py's ~10 s parse of the whole file
            from transformers import AutoConfig

            parsed = AutoConfig.from_pretrained(folder, gguf_file=name)
        # cached with the config: layers/pooling.py reads it
        parsed.gguf_pooling_type = metadata.get(f"{architecture}.pooling_type")
        hf_config = SavedConfig(**json.loads(parsed.to_json_string(use_diff=False)))  # what later starts read back
        tokenizer = _BACKGROUND.submit(_parse_tokenizer, path, cache, architecture, parsed, tensors)  # beside the packing
        return cls(path, hf_config, tokenizer, tensors, cache)

    @property
    def tokenizer(self):
        if isinstance(self._tokenizer, Future):
            self._tokenizer = self._tokenizer.result()
        return self._tokenizer

    @property
    def weight_type(self) -> str:
        """The most common type among the 2-D tensors, what the checkpoint stores its layers as:
        "q4_1", "q8_0", ... or, for float GGUFs, the torch dtype's name ("float16", ...)."""
        types = [t.type for t in self.tensors.values() if len(t.shape) == 2]
        most = max(sorted(set(types)), key=types.count) if types else "f32"
        return {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}.get(most, most)

    @property
    def only_grouped_types(self) -> bool:
        """Whether every matrix is Q4_0 / Q4_1 / Q8_0, the group kernel's types."""
        return all(t.type in GROUPED_TYPES for t in self.tensors.values() if len(t.shape) == 2)

    def raw(self, name: str) -> np.ndarray:
        entry = self.tensors[name]
        return self._file[entry.offset : entry.offset + entry.nbytes]

    def raw_tensor(self, name: str) -> torch.Tensor:
        """The tensor's bytes in the mapped file, as a uint8 tensor (no copy)."""
        return torch.from_numpy(self.raw(name))

    def float_tensor(self, name: str) -> torch.Tensor:
        """An f32 / f16 / bf16 tensor (norms, biases), copied out of the file as float32."""
        entry = self.tensors[name]
        if entry.type == "bf16":
            return self.raw_tensor(name).view(torch.bfloat16).float().reshape(entry.shape)
        dtype = {"f32": np.float32, "f16": np.float16}.get(entry.type)
        if dtype is None:
            raise ValueError(f"{name} is {entry.type}, not a float tensor")
        return torch.from_numpy(np.array(self.raw(name).view(dtype).reshape(entry.shape), dtype=np.float32))

    def populate(self) -> None:
        """Maps every page of the file in one call, before the load reads it all: faulting a 1 GB file
        in page by page took ~1.1 s of a 1.5B model's 1.5 s of packing (warm page cache), and a cold
        cache reads ahead in large requests. Linux 5.14+ (MADV_POPULATE_READ); elsewhere a read-ahead hint."""
        populate(self._map)

    def release_pages(self) -> None:
        """Hands the mapped file's pages back (they count as the process's memory while mapped): after
        the load packed the weights, only the rows an embedding lookup reads come back, on demand."""
        self._map.madvise(mmap.MADV_DONTNEED)

    def groups(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """A Q4_0 / Q4_1 / Q8_0 matrix as levels (uint8 [N, K]), float16 scales and minimums
        ([N, K / 32]) and the bits a level takes: W = scale * level + minimum, exactly the GGUF's values."""
        entry = self.tensors[name]
        if entry.type not in GROUPED_TYPES:
            raise ValueError(f"{name} is {entry.type}; grouped weights come from {', '.join(GROUPED_TYPES)}")
        raw = self.raw_tensor(name)  # a view of the map: gguf_groups only reads it
        levels, scales, minimums = kernels().gguf_groups(raw, *entry.shape, entry.type)
        return levels, scales, minimums, 8 if entry.type == "q8_0" else 4


def populate(mapped: mmap.mmap, huge: bool = False) -> None:
    """Every page of a map mapped in one call; where the kernel is older than 5.14, a read-ahead hint.
    `huge`: in 2 MB pages where the page cache holds 2 MB folios, and reading them so from disk."""
    if huge:
        try:
            mapped.madvise(MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages
            pass
    try:
        mapped.madvise(MADV_POPULATE_READ)
    except OSError:
        mapped.madvise(mmap.MADV_WILLNEED)


def cache_dir(path: str) -> Path:
    """The file's cache folder, keyed by its real path (a folder of links to one file, as a models
    folder often is, shares the file's cache), size and time."""
    stat = os.stat(path)
    key = f"{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}|{INDEX_VERSION}"
    return CACHE_ROOT / hashlib.sha256(key.encode()).hexdigest()[:24]


def _parse_index(path: str, metadata: dict | None = None) -> tuple[dict[str, TensorEntry], str | None]:
    """Every tensor's type, shape, offset and size, and the file's architecture, read from the file's header alone: gguf's
    GGUFReader builds a numpy view per metadata item, ~8 s for a 151,936-token vocabulary; this
    skips the metadata values it does not need (well under a second). `metadata`: given a dict,
    every string and integer value of the header (not the arrays) goes into it by key
    (`general.name`, an embedding model's `<arch>.pooling_type`, ...)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as file:
        blob = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if blob[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic bytes)")
        version, tensor_count, kv_count = struct.unpack_from("<IQQ", blob, 4)
        if version not in (2, 3):
            raise ValueError(f"{path} is GGUF version {version}; versions 2 and 3 are read")
        pos, alignment, architecture = 24, 32, None
        for _ in range(kv_count):
            key, pos = _string(blob, pos)
            (kind,) = struct.unpack_from("<I", blob, pos)
            if key == "general.alignment":
                (alignment,) = struct.unpack_from("<I", blob, pos + 4)
            elif key == "general.architecture" and kind == 8:
                architecture = _string(blob, pos + 4)[0]
            if metadata is not None and kind == 8:
                metadata[key] = _string(blob, pos + 4)[0]
            elif metadata is not None and kind in _INTEGER_FORMATS:
                metadata[key] = struct.unpack_from(_INTEGER_FORMATS[kind], blob, pos + 4)[0]
            pos = _skip_value(blob, pos + 4, kind)
        raw_entries = []
        for _ in range(tensor_count):
            name, pos = _string(blob, pos)
            (dims,) = struct.unpack_from("<I", blob, pos)
            shape = struct.unpack_from(f"<{dims}Q", blob, pos + 4)
            ggml_type, offset = struct.unpack_from("<IQ", blob, pos + 4 + 8 * dims)
            pos += 4 + 8 * dims + 12
            raw_entries.append((name, tuple(int(d) for d in reversed(shape)), GGMLQuantizationType(ggml_type), offset))
        data_start = (pos + alignment - 1) // alignment * alignment
        size = len(blob)
    except struct.error as error:
        raise ValueError(f"{path} ends inside its header: {error}") from error
    finally:
        blob.close()
    tensors = {}
    for name, shape, ggml_type, offset in raw_entries:
        block, block_bytes = GGML_QUANT_SIZES[ggml_type]
        nbytes = math.prod(shape) // block * block_bytes
        if data_start + offset + nbytes > size:
            raise ValueError(f"{path} is truncated: tensor {name} ends past the file's {size} bytes")
        tensors[name] = TensorEntry(ggml_type.name.lower(), shape, data_start + offset, nbytes)
    return tensors, architecture


_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value types but string / array
_INTEGER_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}


def _string(blob, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", blob, pos)
    return blob[pos + 8 : pos + 8 + length].decode("utf-8", errors="replace"), pos + 8 + length


def _skip_value(blob, pos: int, kind: int) -> int:
    """The position past one metadata value of GGUF type `kind`."""
    if kind in _SCALAR_BYTES:
        return pos + _SCALAR_BYTES[kind]
    if kind == 8:  # string
        return pos + 8 + struct.unpack_from("<Q", blob, pos)[0]
    if kind == 9:  # array
        element, count = struct.unpack_from("<IQ", blob, pos)
        pos += 12
        if element in _SCALAR_BYTES:
            return pos + count * _SCALAR_BYTES[element]
        for _ in range(count):
            pos = _skip_value(blob, pos, element)
        return pos
    raise ValueError(f"unknown GGUF metadata value type {kind}")


class SavedConfig(SimpleNamespace):
    """A cached config.json as attributes. transformers wrote every field there, defaults included,
    so this is what its config class would hold, without importing that class: AutoConfig pulls in
    transformers' model-loading stack (sympy, accelerate; ~40 MB resident, docs/performance-log.md
    section 38). Our models only read attributes (getattr with a default where a field is optional)."""


def _read_cached_config(cache: Path) -> SavedConfig:
    return SavedConfig(**json.loads((cache / "config.json").read_text()))


def _read_cached_tokenizer(cache: Path, path: str):
    """The cached tokenizer: tokenizer.json (the pipeline transformers converted from the GGUF) and
    tokenizer_config.json (special tokens; the chat template there or in chat_template.jinja), read
    by TokenizersBackend, whose pipeline is exactly the file's. Not the class transformers named
    (Qwen2Tokenizer, ...): those rebuild their family's pre-tokenizer over the file's (a Qwen2 file
    split code differently from the GGUF's own tokenizer), and AutoTokenizer's machinery cost ~1.5 s
    of a start. Built straight from the files rather than by `from_pretrained`, which also parses the
    whole pipeline as JSON in Python: half of Gemma 3's 2.3 s and a third of its memory (262k
    tokens); the added tokens, with their special flags, are in tokenizer.json. A damaged cache: the
    file's again. Read on the tokenizer's background thread, so inside the transformers lock."""
    with TRANSFORMERS_LOCK:
        return _tokenizer_from_cache(cache, path)


def _tokenizer_from_cache(cache: Path, path: str):
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        settings = json.loads((cache / "tokenizer_config.json").read_text())
        for key in ("tokenizer_class", "added_tokens_decoder"):
            settings.pop(key, None)
        template = settings.pop("chat_template", None)
        if (cache / "chat_template.jinja").exists():
            template = (cache / "chat_template.jinja").read_text()
        tokenizer = TokenizersBackend(tokenizer_file=str(cache / "tokenizer.json"), **settings)
        if template is not None:
            tokenizer.chat_template = template
        return tokenizer
    except Exception as error:  # tokenizers raises a bare Exception for a malformed pipeline
        log.warning("GGUF cache %s: tokenizer unreadable (%s): reading the file's again", cache, error)
        from transformers import AutoTokenizer

        folder, name = os.path.split(os.path.abspath(path))
        return AutoTokenizer.from_pretrained(folder, gguf_file=name)


def _parse_tokenizer(path: str, cache: Path, architecture: str | None, hf_config, tensors: dict[str, TensorEntry]):
    """A new file's tokenizer, as transformers converts it, then the file's cache written (config,
    tokenizer, index); the tokenizer is the one read back from the cache, what later starts get. On
    the tokenizer's background thread, so inside the transformers lock (saving one calls into it too)."""
    folder, name = os.path.split(os.path.abspath(path))
    with fast_gguf_config(architecture):  # holds the transformers lock
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        if _write_cache(cache, hf_config, tokenizer, tensors):
            try:
                return _read_cached_tokenizer(cache, path)
            except (OSError, ValueError, KeyError, ImportError) as error:  # keep the one in hand
                log.warning("GGUF cache %s unreadable right after writing it (%s): using the parsed file", cache, error)
        return tokenizer


_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gguf-tokenizer")


def _write_cache(cache: Path, hf_config, tokenizer, tensors: dict[str, TensorEntry]) -> bool:
    """Best effort: a read-only home only means the next start parses again. True when the cache is there."""
    partial = cache.with_name(cache.name + f".{os.getpid()}.tmp")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        hf_config.to_json_file(partial / "config.json", use_diff=False)  # defaults too: SavedConfig has no class to supply them
        tokenizer.save_pretrained(partial)
        index = {
            name: {"type": e.type, "shape": list(e.shape), "offset": e.offset, "nbytes": e.nbytes} for name, e in tensors.items()
        }
        (partial / "index.json").write_text(json.dumps(index))
    except OSError as error:
        log.warning("could not cache the GGUF's config and tokenizer in %s: %s", cache, error)
        shutil.rmtree(partial, ignore_errors=True)
        return False
    try:
        partial.replace(cache)  # all at once: a reader sees no cache or a whole one
    except OSError:  # another process cached it first
        shutil.rmtree(partial, ignore_errors=True)
    return (cache / "index.json").is_file()


def _read_index(cache: Path) -> dict[str, TensorEntry]:
    index = json.loads((cache / "index.json").read_text())
    return {name: TensorEntry(e["type"], tuple(e["shape"]), e["offset"], e["nbytes"]) for name, e in index.items()}
