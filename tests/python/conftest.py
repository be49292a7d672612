import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import mkcache  # noqa: E402


@pytest.fixture(autouse=True)
def clean_cache_state():
    """Every test starts from an empty cache in default mode on session 0."""
    mkcache.cache.clear()
    yield
    lib = mkcache._capi.lib
    lib.mkc_cache_set_session(0)
    lib.mkc_cache_set_capacity(0)
    lib.mkc_cache_set_input_shape(b"")
    lib.mkc_set_executor(0)
    lib.mkc_set_target_layout(1)
    mkcache.cache.clear()


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(1234)
