import pytest

from inference.engine.kernels import kernels


@pytest.fixture(scope="session")
def cpp():
    """The built kernels; every machine we test on has g++ and AVX2, so not building is a failure."""
    module = kernels()
    assert module is not None, "the engine's AVX2 kernels did not build (see the warning logged)"
    return module


@pytest.fixture(scope="session")
def amx(isas):
    if "amx" not in isas:
        pytest.skip("this CPU (or its OS) offers no AMX-INT8 tiles")
