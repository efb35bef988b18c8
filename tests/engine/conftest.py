import pytest

from inference.engine.env import env_bool
from inference.engine.kernels import kernels


@pytest.fixture(scope="session")
def needs_cpu_kernels():
    """Ask for this (or `cpp`, or `@pytest.mark.usefixtures("needs_cpu_kernels")`) in a test that needs the C++
    kernels: it skips where MINIVLLM_CPU_KERNELS=0 turned them off (the torch paths, CUDA's, tested on a CPU)."""
    if not env_bool("MINIVLLM_CPU_KERNELS", True):
        pytest.skip("needs the CPU kernels, which MINIVLLM_CPU_KERNELS=0 turns off")


@pytest.fixture(scope="session")
def cpp(needs_cpu_kernels):
    """The built kernels; every machine we test on has g++ and AVX2, so not building (where they are on) is a failure."""
    module = kernels()
    assert module is not None, "the engine's AVX2 kernels did not build (see the warning logged)"
    return module


@pytest.fixture
def restore_prefetch(needs_cpu_kernels):
    """The int8 prefetch distance is process-wide: a test that moves it puts it back."""
    before = kernels().weight_prefetch_bytes()
    yield
    kernels().set_weight_prefetch_bytes(before)


ISAS_BY_REACH = ["avx2", "avx512bw", "avx512_vnni", "amx"]  # a CPU that runs one runs those before it


@pytest.fixture(scope="session")
def isas(cpp):
    """Every version of the int8 kernel this CPU can run, so each is checked against the others wherever it runs."""
    return ISAS_BY_REACH[: ISAS_BY_REACH.index(cpp.linear_isa()) + 1]


@pytest.fixture(scope="session")
def vector_isas(isas):
    """Every vector version of the kernels this CPU can run (the grouped and block kernels also run AMX
    tiles from 16 rows, which `isas` includes; the expert and float kernels have no tile version)."""
    return [isa for isa in isas if isa != "amx"]
