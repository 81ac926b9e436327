"""FastKernel (forestpy.cuda_device): launches that skip Numba's dispatch marshal the
arguments exactly as Numba does.  Needs a real GPU (in the simulator fast_kernel
returns the dispatcher itself)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from forestpy.cuda_device import FastKernel, fast_kernel

if numba.config.ENABLE_CUDASIM:
    pytest.skip("FastKernel marshals arguments for a real GPU", allow_module_level=True)
try:
    from numba import cuda

    if not cuda.is_available():
        raise ImportError
    import cupy
except ImportError:
    pytest.skip("no GPU", allow_module_level=True)


@cuda.jit
def _axpy(out, a, b, x, n, flag, scale32, k32):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        v = a * x[i, j] + b[j] + n + k32
        if flag:
            v = v * scale32
        out[i, j] = v


def _expected(a, b, x, n, flag, scale32, k32):
    v = a * x + b[None, :] + n + k32
    return v * scale32 if flag else v


def test_fast_path_matches_numba_and_the_formula():
    kernel = fast_kernel(_axpy)
    assert isinstance(kernel, FastKernel)
    rng = np.random.default_rng(1)
    x = cupy.asarray(rng.random((37, 19)))
    b = cupy.asarray(rng.random(19))
    for launch_no in range(3):  # the first through Numba, the others marshalled here
        out = cupy.zeros((37, 19))
        args = (out, 0.5 + launch_no, b, x, 3 + launch_no, launch_no % 2 == 1,
                np.float32(1.5), np.int32(-2))
        kernel[(5, 3), (8, 8)](*args)
        want = _expected(*(cupy.asnumpy(a) if hasattr(a, "shape") and a.ndim else a
                           for a in args[1:]))
        assert np.allclose(cupy.asnumpy(out), want, rtol=0, atol=1e-12)
    entries = list(kernel._compiled.values())
    assert len(entries) == 1 and entries[0] is not False  # the fast path was taken


def test_views_and_host_arrays_keep_numba_semantics():
    kernel = fast_kernel(_axpy)
    x = cupy.arange(40 * 20, dtype=np.float64).reshape(40, 20)[::2, 1:]  # strided view
    b = cupy.ones(19)
    for _ in range(2):
        out = cupy.zeros((20, 19))
        kernel[(3, 3), (8, 8)](out, 1.0, b, x, 0, False, np.float32(1.0), np.int32(0))
        assert np.array_equal(cupy.asnumpy(out), cupy.asnumpy(x) + 1.0)
