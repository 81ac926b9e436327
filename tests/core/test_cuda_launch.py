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


def test_launch_kernel_types_each_signature_once(monkeypatch):
    """After the first launch with a combination of argument types (typed and compiled
    by Numba's dispatcher), launches with the same types go to the compiled kernel's
    own launch with the views; another combination is typed again.  Numba's objects are
    stood in for (no GPU here)."""
    from types import SimpleNamespace

    import numpy as np
    from numba import typeof, types

    import forestpy.cuda_device as cd

    class LikeCupy:
        def __init__(self, ptr, n=6):
            self.dtype, self.shape, self.strides = np.dtype(np.float64), (n,), (8,)
            self.size, self.ndim, self.data = n, 1, SimpleNamespace(ptr=ptr)

    calls = []

    class Compiled:
        def launch(self, args, griddim, blockdim, stream, sharedmem):
            calls.append(("compiled", [int(a.device_ctypes_pointer) if hasattr(
                a, "device_ctypes_pointer") else a for a in args], griddim))

    class Config:
        griddim, blockdim, stream, sharedmem = (3, 1, 1), (64, 1, 1), 0, 0

        def __call__(self, *args):
            calls.append(("dispatcher", len(args)))

    ty = types.Array(types.float64, 1, "C")

    class Kernel:
        overloads = {(ty, types.int64, types.float64): Compiled()}

        def __getitem__(self, config):
            return Config()

        def typeof_pyval(self, a):
            return typeof(a)

    monkeypatch.setattr(cd, "_CUPY_NDARRAY", LikeCupy)
    monkeypatch.setattr(cd, "_COMPILED", {})
    monkeypatch.setitem(cd._ARRAY_TYPES, ("<f8", (6,), (8,)), ty)
    kernel = Kernel()
    cd.launch_kernel(kernel, 3, 64, 0, LikeCupy(0x1000), 5, 0.5)
    cd.launch_kernel(kernel, 3, 64, 0, LikeCupy(0x2000), 7, 0.25)
    cd.launch_kernel(kernel, 3, 64, 0, LikeCupy(0x3000), 7, True)  # other types
    cd.launch_kernel(kernel, 3, 64, 0, LikeCupy(0x3000), 7, True)  # not compiled: typed
    assert calls == [("dispatcher", 3), ("compiled", [0x2000, 7, 0.25], (3, 1, 1)),
                     ("dispatcher", 3), ("dispatcher", 3)]
