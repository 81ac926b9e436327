"""Per-patch state summary for the step's validity check, as one batched kernel.

``patch_status(q, mbc, positive)`` returns an array ``(npatch, 1 + len(positive))``:
column 0 the sum of every interior value of the patch (NaN or Inf if any value is),
column ``1 + k`` the smallest interior value of component ``positive[k]``.  The step
then reduces these small contiguous columns, so checking a state costs one pass over
the patch interiors (NumPy/CuPy reductions over the strided interior views would cost
one pass each, and strided ones at that).

``step_status(q, mbc, positive, cfl, backend)`` is the whole record a GPU step checks
(largest Courant number, sum of the interior, smallest value of each positive field) in
one launch and one transfer: each block summarises its patch, and the last block to
finish (a ticket counter, as in CUDA's ``threadFenceReduction`` sample) reduces the
per-patch rows and the Courant numbers in a fixed order, so the record does not depend
on the order in which blocks run.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["courant_of_rows", "patch_status", "step_status"]

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


def _gpu_step_kernel():
    """The fused status kernel of :func:`step_status` (compiled on first use)."""
    global cuda
    if "step" in _GPU:
        return _GPU["step"]
    from numba import cuda as _cuda
    from numba import float64, int32

    from forestpy.cuda_device import cuda_device, fast_kernel

    cuda = _cuda
    T = _THREADS
    cell = cuda_device(_status_cell)

    @cuda.jit(device=True, inline=True)
    def block_reduce(buf, t, mode):
        """``buf[0]`` := the sum (``mode`` 0), minimum (1) or maximum (2, NaN if any
        value is NaN, as CuPy's ``max``) of ``buf[:T]``, in a fixed tree order."""
        cuda.syncthreads()
        s = T // 2
        while s > 0:
            if t < s:
                a = buf[t]
                b = buf[t + s]
                if mode == 0:
                    buf[t] = a + b
                elif mode == 1:
                    if b < a:
                        buf[t] = b
                elif a == a and not b <= a:
                    buf[t] = b
            cuda.syncthreads()
            s //= 2

    @cuda.jit
    def status(q, mbc, positive, ncol, cfl, per_patch, ticket, out):
        b = cuda.blockIdx.x
        t = cuda.threadIdx.x
        buf = cuda.shared.array(T, float64)
        last = cuda.shared.array(1, int32)
        if b < q.shape[0]:
            ny = q.shape[2] - 2 * mbc
            nx = q.shape[3] - 2 * mbc
            for col in range(ncol):
                acc = 0.0 if col == 0 else np.inf
                for c in range(t, nx * ny, T):
                    acc = cell(q, b, mbc + c // nx, mbc + c % nx, positive, col, acc)
                buf[t] = acc
                block_reduce(buf, t, 0 if col == 0 else 1)
                if t == 0:
                    per_patch[b, col] = buf[0]
                cuda.syncthreads()
        # the block's rows are written: the last block to take a ticket sees them all
        if t == 0:
            cuda.threadfence()
            last[0] = cuda.atomic.add(ticket, 0, 1) == cuda.gridDim.x - 1
        cuda.syncthreads()
        if not last[0]:
            return
        acc = 0.0  # Courant numbers are >= 0; none (no patch stepped): 0
        for k in range(t, cfl.shape[0], T):
            v = cfl[k]
            if acc == acc and not v <= acc:  # a NaN stays
                acc = v
        buf[t] = acc
        block_reduce(buf, t, 2)
        if t == 0:
            out[0] = buf[0]
        cuda.syncthreads()
        for col in range(ncol):
            acc = 0.0 if col == 0 else np.inf
            for k in range(t, per_patch.shape[0], T):
                v = per_patch[k, col]
                if col == 0:
                    acc += v
                elif v < acc:
                    acc = v
            buf[t] = acc
            block_reduce(buf, t, 0 if col == 0 else 1)
            if t == 0:
                out[1 + col] = buf[0]
            cuda.syncthreads()
        if t == 0:
            ticket[0] = 0  # ready for the next launch

    @cuda.jit
    def rows_max(cfl, rows, out, slot):
        t = cuda.threadIdx.x
        buf = cuda.shared.array(T, float64)
        acc = 0.0
        for k in range(t, rows.shape[0], T):
            v = cfl[rows[k]]
            if acc == acc and not v <= acc:  # a NaN stays
                acc = v
        buf[t] = acc
        block_reduce(buf, t, 2)
        if t == 0:
            out[slot] = buf[0]

    _GPU["step"] = status = fast_kernel(status)
    _GPU["rows_max"] = fast_kernel(rows_max)
    return status


def courant_of_rows(cfl, rows, out, slot: int) -> None:
    """``out[slot] = max(cfl[rows])`` on the device (NaN if any is, 0 for no rows), one
    launch of one block: a level step's Courant number kept on the device until the
    subcycled step reads all of them at once."""
    from forestpy.cuda_device import launch_kernel, launch_stream

    _gpu_step_kernel()
    launch_kernel(_GPU["rows_max"], 1, _THREADS, launch_stream(), cfl, rows, out, int(slot))


def step_status(q, mbc: int, positive, cfl, backend, check: bool = True) -> np.ndarray:
    """Host float64 ``[largest of cfl, sum of every interior value of q, smallest
    interior value of each component positive[k]...]`` (only the first entry when not
    ``check``) from one GPU launch and one transfer (see the module docstring).

    The largest Courant number is NaN if any entry of ``cfl`` is, 0 for an empty
    ``cfl``; the sum is not finite if a value is not; the minima are exact.  Device
    arrays ``q`` and ``cfl`` on the GPU backend ``backend``.
    """
    return backend.to_host(launch_step_status(q, mbc, positive, cfl, backend, check)).copy()


def launch_step_status(q, mbc: int, positive, cfl, backend, check: bool = True):
    """The launch of :func:`step_status` without the transfer: the device record
    (reused by the next launch; its address stays while ``q`` has as many patches)."""
    ncol = 1 + len(positive) if check else 0
    return _status_launch(q, mbc, positive, cfl, backend, ncol)[1]


def _status_launch(q, mbc: int, positive, cfl, backend, ncol: int):
    """One launch of the status kernel: ``(per-patch rows, record)`` in the backend's
    reused work arrays (valid until the next launch); ``cfl`` None: no Courant
    numbers (the record's first entry is then 0)."""
    from forestpy.cuda_device import launch_kernel, launch_stream

    npatch = q.shape[0] if ncol else 0
    work = _GPU.setdefault(("work", id(backend)), {})
    key = ("positive", tuple(positive))
    pos = work.get(key)
    if pos is None:
        pos = work[key] = backend.to_device(np.asarray(positive, np.int64).reshape(-1))
    if work.get("ticket") is None:
        work["ticket"] = backend.to_device(np.zeros(1, np.int32))
    rows = work.get("per_patch")
    if rows is None or rows.shape[0] < npatch or rows.shape[1] < max(ncol, 1):
        rows = work["per_patch"] = backend.xp.empty((max(npatch, 1), 1 + len(positive)))
    out = work.get(("out", ncol))
    if out is None:
        out = work[("out", ncol)] = backend.xp.empty(1 + ncol)
    if cfl is None:
        cfl = work.get("no_cfl")
        if cfl is None:
            cfl = work["no_cfl"] = backend.xp.zeros(0)
    stream = launch_stream()
    launch_kernel(_gpu_step_kernel(), max(npatch, 1), _THREADS, stream, q, mbc, pos, ncol, cfl,
                  rows[:npatch], work["ticket"], out)
    return rows[:npatch, :ncol], out


def patch_status(q, mbc: int, positive, backend=None):
    """``(npatch, 1 + len(positive))`` float64 array on the backend of ``q``."""
    xp = np if backend is None else backend.xp
    npatch = q.shape[0]
    out = xp.empty((npatch, 1 + len(positive)), dtype=np.float64)
    if npatch == 0:
        return out
    if backend is not None and backend.is_gpu:
        # the per-patch rows of the step's status kernel (no Courant numbers)
        out[...] = _status_launch(q, mbc, positive, None, backend, 1 + len(positive))[0]
    else:
        _status_cpu(q, mbc, np.asarray(positive, dtype=np.int64), out)
    return out
