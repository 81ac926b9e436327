"""Per-patch state summary for the step's validity check, as one batched kernel.

``patch_status(q, mbc, positive)`` returns an array ``(npatch, 1 + len(positive))``:
column 0 the sum of every interior value of the patch (NaN or Inf if any value is),
column ``1 + k`` the smallest interior value of component ``positive[k]``.  The step
then reduces these small contiguous columns, so checking a state costs one pass over
the patch interiors (NumPy/CuPy reductions over the strided interior views would cost
one pass each, and strided ones at that).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["patch_status"]

_THREADS = 128
_GPU: dict = {}
cuda = None  # numba.cuda, bound on first GPU use (a module global for the simulator)


@numba.njit(cache=True, inline="always")
def _status_cell(q, p, j, i, positive, col, acc):
    """``acc`` updated with cell ``(j, i)`` of patch ``p`` for status column ``col``: plus
    every component (col 0), or the minimum with component ``positive[col - 1]``.  The
    body of the CPU kernel (one thread a patch, cells in order) and of the GPU kernel
    (a block a patch, its threads over the cells, then a block reduction)."""
    if col == 0:
        for m in range(q.shape[1]):
            acc += q[p, m, j, i]
        return acc
    v = q[p, positive[col - 1], j, i]
    return v if v < acc else acc


@numba.njit(parallel=True, cache=True)
def _status_cpu(q, mbc, positive, out):
    ny = q.shape[2] - mbc
    nx = q.shape[3] - mbc
    for p in numba.prange(q.shape[0]):
        for col in range(1 + positive.shape[0]):
            acc = 0.0 if col == 0 else np.inf
            for j in range(mbc, ny):
                for i in range(mbc, nx):
                    acc = _status_cell(q, p, j, i, positive, col, acc)
            out[p, col] = acc


def _gpu_kernel():
    global cuda
    if "status" in _GPU:
        return _GPU["status"]
    from numba import cuda as _cuda
    from numba import float64

    from forestpy.cuda_device import cuda_device, fast_kernel

    cuda = _cuda
    T = _THREADS
    cell = cuda_device(_status_cell)

    @cuda.jit
    def status(q, mbc, positive, out):
        p = cuda.blockIdx.x
        t = cuda.threadIdx.x
        buf = cuda.shared.array(T, float64)
        ny = q.shape[2] - 2 * mbc
        nx = q.shape[3] - 2 * mbc
        for col in range(1 + positive.shape[0]):
            acc = 0.0 if col == 0 else np.inf
            for c in range(t, nx * ny, T):
                acc = cell(q, p, mbc + c // nx, mbc + c % nx, positive, col, acc)
            buf[t] = acc
            cuda.syncthreads()
            s = T // 2
            while s > 0:
                if t < s:
                    if col == 0:
                        buf[t] += buf[t + s]
                    elif buf[t + s] < buf[t]:
                        buf[t] = buf[t + s]
                cuda.syncthreads()
                s //= 2
            if t == 0:
                out[p, col] = buf[0]
            cuda.syncthreads()

    _GPU["status"] = status = fast_kernel(status)
    return status


def patch_status(q, mbc: int, positive, backend=None):
    """``(npatch, 1 + len(positive))`` float64 array on the backend of ``q``."""
    xp = np if backend is None else backend.xp
    npatch = q.shape[0]
    out = xp.empty((npatch, 1 + len(positive)), dtype=np.float64)
    if npatch == 0:
        return out
    if backend is not None and backend.is_gpu:
        key = ("positive", tuple(positive))
        pos = _GPU.get((id(backend), key))
        if pos is None:
            pos = _GPU[(id(backend), key)] = backend.to_device(np.asarray(positive, np.int64))
        _gpu_kernel()[npatch, _THREADS](q, mbc, pos, out)
    else:
        _status_cpu(q, mbc, np.asarray(positive, dtype=np.int64), out)
    return out
