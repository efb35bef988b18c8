import pytest


@pytest.fixture(scope="session")
def amx(isas):
    if "amx" not in isas:
        pytest.skip("this CPU (or its OS) offers no AMX-INT8 tiles")
