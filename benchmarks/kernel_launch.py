"""Python cost of one Numba-CUDA kernel launch with CuPy arguments: Numba's own dispatch
against the marshalling :class:`forestpy.cuda_device.FastKernel` does (the arguments
built as Numba's ``_Kernel.launch`` builds them, then ``cuda.core.launch``), with the
arguments built per launch and prebuilt.  Needs a GPU.  Prints one JSON record of
microseconds per launch: host time of 2000 launches, then the same including the final
synchronisation.

    python benchmarks/kernel_launch.py
"""

from __future__ import annotations

import ctypes
import json
import time

import cupy as cp
import numba
from numba import cuda

numba.config.CUDA_ARRAY_INTERFACE_SYNC = False
N = 4096


@cuda.jit
def axpy11(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, dt, n):
    i = cuda.grid(1)
    if i < n:
        a0[i] += dt * a1[i] + a10[i]


def per_launch_us(launch, n=2000):
    launch()
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        launch()
    t1 = time.perf_counter()
    cuda.synchronize()
    t2 = time.perf_counter()
    return round((t1 - t0) / n * 1e6, 2), round((t2 - t0) / n * 1e6, 2)


def marshalled(args):
    """The kernel parameters as Numba's launch builds them (arrays: meminfo, parent,
    size, itemsize, data pointer, shape, strides)."""
    out = []
    for v in args:
        if isinstance(v, cp.ndarray):
            out += [0, 0, v.size, v.itemsize, v.data.ptr, *v.shape, *v.strides]
        elif isinstance(v, float):
            out.append(ctypes.c_double(v))
        else:
            out.append(ctypes.c_int64(v))
    return out


def main():
    from cuda.core import LaunchConfig, launch
    from numba.cuda.cudadrv import driver

    arrays = [cp.ones(N) for _ in range(11)]
    args = (*arrays, 0.1, N)
    axpy11[16, 256](*args)
    compiled = axpy11.overloads[tuple(axpy11.typeof_pyval(a) for a in args)]
    function = compiled._codelibrary.get_cufunc().kernel
    stream = driver._to_core_stream(0)
    config = LaunchConfig(grid=(16, 1, 1), block=(256, 1, 1), shmem_size=0)

    arrays[0][:] = 1.0
    launch(stream, config, function, *marshalled(args))
    assert float(arrays[0][5]) == 1.0 + 0.1 + 1.0  # the marshalled launch computes

    prebuilt = marshalled(args)
    rec = {
        "benchmark": "kernel_launch", "device": cuda.get_current_device().name.decode()
        if isinstance(cuda.get_current_device().name, bytes) else cuda.get_current_device().name,
        "arguments": len(args),
        "numba_dispatch_us": per_launch_us(lambda: axpy11[16, 256](*args)),
        "marshalled_us": per_launch_us(
            lambda: launch(stream, config, function, *marshalled(args))),
        "marshalled_prebuilt_us": per_launch_us(
            lambda: launch(stream, config, function, *prebuilt)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
