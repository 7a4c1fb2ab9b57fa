"""pytest setup: tgraph is imported from the build tree (ctest sets PYTHONPATH)."""
import os

import numpy as np
import pytest

# tgraph.torch.compile's disk cache would let one run's executables answer the next run's
# tests (and their compile counts); test_torch_cache.py turns it on in a folder of its own.
os.environ["TGRAPH_NO_COMPILE_CACHE"] = "1"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
