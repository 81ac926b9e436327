import os

# GPU code paths run in Numba's CUDA simulator unless told otherwise (set before anything
# imports numba, which reads the variable once); export NUMBA_ENABLE_CUDASIM=0 on a
# machine with a GPU to run the GPU tests (tests/core/patches/test_gpu_patches.py, ...)
# on the device
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402
from testsupport import load_demo  # noqa: E402


@pytest.fixture(scope="session")
def radial_dam():
    return load_demo("radial_dam")


@pytest.fixture(scope="session")
def swirl():
    return load_demo("advection_swirl")


@pytest.fixture(scope="session")
def euler_quadrants():
    return load_demo("euler_quadrants")
