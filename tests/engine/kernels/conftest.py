import pytest

from inference.engine.kernels import kernels


@pytest.fixture(scope="session")
def compiled():
    """The built kernels; every machine we test on has g++ and AVX2, so not building is a failure."""
    module = kernels()
    assert module is not None, "the engine's AVX2 kernels did not build (see the warning logged)"
    return module


ISAS_BY_REACH = ["avx2", "avx512bw", "avx512_vnni", "amx"]  # a CPU that runs one runs those before it


@pytest.fixture(scope="session")
def isas(compiled):
    """Every version of the int8 kernel this CPU can run, so each is checked against the others wherever it runs."""
    return ISAS_BY_REACH[: ISAS_BY_REACH.index(compiled.linear_isa()) + 1]


@pytest.fixture(scope="session")
def vector_isas(isas):
    """Every version of the 4-bit kernel this CPU can run (it has no AMX version)."""
    return [isa for isa in isas if isa != "amx"]


@pytest.fixture(scope="session")
def amx(isas):
    if "amx" not in isas:
        pytest.skip("this CPU (or its OS) offers no AMX-INT8 tiles")
