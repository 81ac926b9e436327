"""Kernel launches with CuPy arguments (forestpy.cuda_device.launch_kernel).

A real launch needs a GPU; what can be checked without one is that the light view a
CuPy array is passed as gives Numba's argument marshalling and typing the values a
Numba device array of the same memory would give.  Numba's real CUDA modules are
imported in a child process (the test session runs the CUDA simulator)."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
from types import SimpleNamespace

import numpy as np
from numba import typeof, types
from numba.cuda.dispatcher import _Kernel

from forestpy.cuda_device import _DeviceArrayView


class LikeCupy:
    # the attributes the view reads of a cupy.ndarray
    def __init__(self, shape, strides, ptr):
        self.shape, self.strides = shape, strides
        self.dtype = np.dtype(np.float64)
        self.ndim = len(shape)
        self.size = int(np.prod(shape))
        self.data = SimpleNamespace(ptr=ptr)


ty = types.Array(types.float64, 4, "A")
a = LikeCupy((3, 2, 8, 8), (2048, 512, 64, 8), 0x7F0000001000)
view = _DeviceArrayView(a, ty)
assert typeof(view) is ty
args = []
_Kernel._prepare_args(SimpleNamespace(extensions=[]), ty, view, 0, [], args)
print([getattr(x, "value", x) for x in args])
"""


def test_device_array_view_marshals_as_a_numba_device_array():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True).stdout
    # meminfo, parent, items, item size, data pointer, shape, strides (bytes)
    assert out.strip() == str([None, None, 384, 8, 0x7F0000001000, 3, 2, 8, 8, 2048, 512,
                               64, 8])
