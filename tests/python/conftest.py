"""pytest setup: tgraph is imported from the build tree (ctest sets PYTHONPATH)."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
