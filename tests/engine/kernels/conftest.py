import pytest

from inference.engine.kernels import kernels


@pytest.fixture(scope="session")
def compiled():
    """The built kernels; every machine we test on has g++ and AVX2, so not building is a failure."""
    module = kernels()
    assert module is not None, "the engine's AVX2 kernels did not build (see the warning logged)"
    return module


ISAS_BY_REACH = ["avx2", "avx512bw", "avx512_vnni"]  # a CPU that runs one runs those before it


@pytest.fixture(scope="session")
def isas(compiled):
    """Every version of the int8 and 4-bit kernels this CPU can run, so each is checked against the others wherever it runs."""
    return ISAS_BY_REACH[: ISAS_BY_REACH.index(compiled.linear_isa()) + 1]
