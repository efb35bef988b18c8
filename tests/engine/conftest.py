import pytest

from inference.engine.kernels import kernels


@pytest.fixture
def restore_prefetch():
    """The int8 prefetch distance is process-wide: a test that moves it puts it back."""
    before = kernels().int8_prefetch_bytes()
    yield
    kernels().int8_set_prefetch_bytes(before)
