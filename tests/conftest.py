import os

# GPU code paths run in Numba's CUDA simulator unless told otherwise (set before anything
# imports numba, which reads the variable once); export NUMBA_ENABLE_CUDASIM=0 on a
# machine with a GPU to run tests/test_gpu_patches.py on the device
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_demo(name: str):
    """Import ``demos/<name>.py`` as a module (demos are scripts, not a package)."""
    path = ROOT / "demos" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"demo_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def radial_dam():
    return load_demo("radial_dam")


@pytest.fixture(scope="session")
def swirl():
    return load_demo("advection_swirl")


@pytest.fixture(scope="session")
def euler_quadrants():
    return load_demo("euler_quadrants")
