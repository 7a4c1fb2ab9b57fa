"""ctest's python_gpu_tests: exits 77 (reported as skipped) without a CUDA device, else runs
test_cuda.py under pytest."""
import os
import sys

import pytest

import tgraph as tg

if tg.Device.cuda_device_count() == 0:
    print("no CUDA device: skipped")
    sys.exit(77)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", os.path.join(os.path.dirname(__file__), "test_cuda.py")]))
