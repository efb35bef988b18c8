"""llama.cpp's `llama-server`, the peer our defaults are measured against: built once, run as a subprocess.

The source is the one vendored in the `llama-cpp-python` sdist (PyPI is reachable where GitHub may
not be); it is built with the machine's own instruction set (`GGML_NATIVE`) into
~/.cache/minivllm/llama.cpp, outside the repository, once (~5 min on 2 cores).

On AMX Xeons that source dies at its first tile instruction (SIGILL or SIGSEGV in ggml's AMX
matmul during its warm-up): GCC drops the stores to the tile configuration, which lives on the
stack, so the tiles are configured with garbage (llama.cpp PR #26954, open). The source is built
with that PR's fix applied (`fix_amx_tile_state`: the configuration in static memory; the
permission for the tile state asked on every thread too, as the PR does), so its native AMX path
runs. Should a native build still
crash starting, the server is rebuilt once without AMX (`-mno-amx-*`, its AVX-512 VNNI kernels) and
the report's command says so; a ratio against that build judges nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Self

from .server import free_port, launch, resident_mb, settled_resident_mb, stop, wait_healthy

VERSION = "0.3.36"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minivllm" / "llama.cpp"


BUILDS = {  # name: extra CMake arguments
    "native": [],
    "native-no-amx": [f"-DCMAKE_{lang}_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" for lang in ("C", "CXX")],
}
CRASHES = (-signal.SIGILL, -signal.SIGSEGV)
_crashed: set[str] = set()  # builds that died with SIGILL here: later servers skip them


def binary_path(name: str = "native") -> Path:
    build_dir = "build" if name == "native" else f"build-{name}"
    return CACHE / f"llama-cpp-python-{VERSION}" / "vendor" / "llama.cpp" / build_dir / "bin" / "llama-server"


def build(name: str = "native", quantize: bool = False) -> Path:
    """The llama-server binary of that build, downloaded and built the first time; with `quantize`,
    llama-quantize beside it too (the tests re-quantize real weights with it)."""
    binary = binary_path(name)
    targets = ["llama-server", *(["llama-quantize"] if quantize else [])]
    missing = [target for target in targets if not (binary.parent / target).is_file()]
    if not missing:
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = CACHE / f"llama_cpp_python-{VERSION}.tar.gz"
    if not sdist.is_file():
        print(f"downloading the llama-cpp-python {VERSION} sdist for llama.cpp's source ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"llama-cpp-python=={VERSION}",
                "-d",
                str(CACHE),
            ],
            check=True,
        )
    source = CACHE / f"llama-cpp-python-{VERSION}"
    if not source.is_dir():
        with tarfile.open(sdist) as archive:
            archive.extractall(CACHE, filter="data")
        shutil.move(str(CACHE / f"llama_cpp_python-{VERSION}"), str(source))
    tree = source / "vendor" / "llama.cpp"
    fix_amx_tile_state(tree)
    build_dir = str(binary.parent.parent.relative_to(tree))
    print(f"building {' and '.join(missing)} ({name}; once, ~5-10 min on 2 cores) ...", flush=True)
    subprocess.run(
        [
            "cmake",
            "-B",
            build_dir,
            "-DLLAMA_BUILD_SERVER=ON",
            "-DLLAMA_CURL=OFF",
            "-DGGML_NATIVE=ON",
            "-DCMAKE_BUILD_TYPE=Release",
            *BUILDS[name],
        ],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["cmake", "--build", build_dir, "--target", *missing, "-j", str(os.cpu_count() or 2)],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    return binary


AMX_TILE_FILE = Path("ggml/src/ggml-cpu/amx/mmq.cpp")
AMX_TILE_BROKEN = "    alignas(64) tile_config_t tc = {};\n"
AMX_TILE_FIXED = """    // mini-vLLM's build: the configuration in static memory (GCC dropped the stores to a stack
    // copy, which _tile_loadconfig reads behind its back: the fix) and the tile state asked of
    // Linux on this thread too, as the PR does (granted per process; a second ask is harmless).
    syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
    alignas(64) static thread_local tile_config_t tc = {};
"""
AMX_TILE_INCLUDES = "#include <sys/syscall.h>\n#include <unistd.h>\n"


def fix_amx_tile_state(tree: Path) -> bool:
    """Applies llama.cpp PR #26954's fix to the vendored source, once (True if it changed it): without
    it the native build crashes on AMX Xeons, and the peer would run without its AMX kernels."""
    path = tree / AMX_TILE_FILE
    text = path.read_text()
    if AMX_TILE_FIXED in text:
        return False
    if AMX_TILE_BROKEN not in text:
        raise RuntimeError(f"{path}: the AMX tile configuration is not where the fix expects it")
    path.write_text(AMX_TILE_INCLUDES + text.replace(AMX_TILE_BROKEN, AMX_TILE_FIXED, 1))
    return True


def build_that_runs() -> str:
    """The first build not seen to crash here."""
    return next(name for name in BUILDS if name not in _crashed)


class LlamaServer:
    """`with LlamaServer(gguf) as server:` -> server.base_url, .ready_s (start to /health 200), .resident_mb()."""

    def __init__(
        self,
        gguf: str,
        *,
        slots: int = 32,
        context: int = 32768,
        log_path: str | None = None,
        startup_timeout: float = 120.0,
        extra: tuple[str, ...] = (),
    ):
        self.gguf, self.slots, self.context = gguf, slots, context
        self.extra = tuple(extra)  # more flags, e.g. ("--spec-type", "ngram-mod") (bench/speculative.py)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.ready_s = None
        self.build = build_that_runs()
        self._process: subprocess.Popen | None = None

    @property
    def argv(self) -> list[str]:
        threads = str(len(os.sched_getaffinity(0)))
        return [
            str(binary_path(self.build)),
            "-m",
            self.gguf,
            "-np",
            str(self.slots),
            "-c",
            str(self.context),
            "-t",
            threads,
            "--no-webui",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.extra,
        ]

    @property
    def command(self) -> str:
        built = "" if self.build == "native" else f" (built {self.build}: the native build's AMX path crashed here)"
        return " ".join(["llama-server", *self.argv[1:]]) + built

    def __enter__(self) -> Self:
        build(self.build)
        try:
            return self._start()
        except RuntimeError:
            if self._process.returncode not in CRASHES or self.build == list(BUILDS)[-1]:
                raise
        print(
            f"llama-server ({self.build}) crashed starting ({signal.Signals(-self._process.returncode).name}); "
            "using a build without AMX",
            flush=True,
        )
        _crashed.add(self.build)
        self.build = build_that_runs()
        build(self.build)
        return self._start()

    def _start(self) -> Self:
        self._process, started = launch(self.argv, self.log_path)
        try:
            self.ready_s = wait_healthy(
                self._process, self.base_url, started, self.startup_timeout, "llama-server", self.log_path
            )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def resident_mb(self) -> float:
        """The server process's resident memory now."""
        return resident_mb(self._process)

    def resident_after_load_mb(self) -> float:
        return settled_resident_mb(self._process)

    def __exit__(self, *exc) -> None:
        stop(self._process, timeout=30)


def prepare() -> str:
    """Everything the llama.cpp-gated tests need (`make llama-cpp`, which CI runs before the tests):
    llama-server and llama-quantize built natively, then a start on the embedded GGUF, which on an
    AMX Xeon whose native build dies builds the one without AMX too. The name of the build that runs."""
    from inference.engine.loader import resolve_source

    build("native", quantize=True)
    source = resolve_source(None)
    with LlamaServer(os.path.join(source.path, source.gguf_file), slots=1, context=512) as server:
        return server.build


if __name__ == "__main__":
    print(f"llama.cpp ready: llama-server ({prepare()}) and llama-quantize in {CACHE}")
