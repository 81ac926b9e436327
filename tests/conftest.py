import os

# GPU code paths run in Numba's CUDA simulator unless told otherwise (set before anything
# imports numba, which reads the variable once); export NUMBA_ENABLE_CUDASIM=0 on a
# machine with a GPU to run the GPU tests (tests/core/patches/test_gpu_patches.py, ...)
# on the device
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from testsupport import demo_fixture  # noqa: E402

radial_dam = demo_fixture("radial_dam")
swirl = demo_fixture("advection_swirl")
euler_quadrants = demo_fixture("euler_quadrants")
