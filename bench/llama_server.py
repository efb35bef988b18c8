"""llama.cpp's `llama-server`, the peer our defaults are measured against: built once, run as a subprocess.

The source is the one vendored in the `llama-cpp-python` sdist (PyPI is reachable where GitHub may
not be); it is built with the machine's own instruction set (`GGML_NATIVE`) into
~/.cache/minivllm/llama.cpp, outside the repository, once (~5 min on 2 cores).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Self

from .server import free_port, resident_mb, stop, wait_healthy

VERSION = "0.3.36"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minivllm" / "llama.cpp"


def binary_path() -> Path:
    return CACHE / f"llama-cpp-python-{VERSION}" / "vendor" / "llama.cpp" / "build" / "bin" / "llama-server"


def build() -> Path:
    """The llama-server binary, downloaded and built the first time."""
    binary = binary_path()
    if binary.is_file():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = CACHE / f"llama_cpp_python-{VERSION}.tar.gz"
    if not sdist.is_file():
        print(f"downloading the llama-cpp-python {VERSION} sdist for llama.cpp's source ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={VERSION}", "-d", str(CACHE)], check=True)
    source = CACHE / f"llama-cpp-python-{VERSION}"
    if not source.is_dir():
        with tarfile.open(sdist) as archive:
            archive.extractall(CACHE, filter="data")
        shutil.move(str(CACHE / f"llama_cpp_python-{VERSION}"), str(source))
    tree = source / "vendor" / "llama.cpp"
    print("building llama-server (once, ~5 min on 2 cores) ...", flush=True)
    subprocess.run(["cmake", "-B", "build", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON",
                    "-DCMAKE_BUILD_TYPE=Release"], cwd=tree, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", "build", "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                   cwd=tree, check=True, capture_output=True)
    return binary


class LlamaServer:
    """`with LlamaServer(gguf) as server:` -> server.base_url, .ready_s (start to /health 200), .resident_mb()."""

    def __init__(self, gguf: str, *, slots: int = 32, context: int = 32768, log_path: str | None = None,
                 startup_timeout: float = 120.0):
        self.gguf, self.slots, self.context = gguf, slots, context
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.ready_s = None
        self._process: subprocess.Popen | None = None

    @property
    def argv(self) -> list[str]:
        threads = str(len(os.sched_getaffinity(0)))
        return [str(binary_path()), "-m", self.gguf, "-np", str(self.slots), "-c", str(self.context), "-t", threads,
                "--no-webui", "--host", "127.0.0.1", "--port", str(self.port)]

    @property
    def command(self) -> str:
        return " ".join(["llama-server", *self.argv[1:]])

    def __enter__(self) -> Self:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        started = time.monotonic()
        self._process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        if self.log_path:
            log.close()
        try:
            self.ready_s = wait_healthy(self._process, self.base_url, started, self.startup_timeout, "llama-server", self.log_path)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def resident_mb(self) -> float:
        """The server process's resident memory now."""
        return resident_mb(self._process)

    def __exit__(self, *exc) -> None:
        stop(self._process, timeout=30)
