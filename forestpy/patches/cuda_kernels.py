"""CUDA kernels of the patch operations (GPU backend), built on first use.

Importing this module imports no ``numba.cuda``: the kernels are compiled the first time
a GPU path asks for them (:func:`kernels`), so CPU-only runs never touch CUDA.

* ghost fill: one kernel per plan list (copy, average, interpolate), one thread per plan
  entry, 256 threads per block; each thread calls the per-entry body of
  :mod:`forestpy.patches.ghost_plan`, compiled as a device function by
  :func:`forestpy.cuda_device.cuda_device` (single source for CPU and GPU).
* physical boundaries (``"extrap"``, ``"wall"``): one launch per side, one thread per
  (patch on the side, cell position along the side), looping over components and ghost
  layers.
* regrid transfer: one kernel per case (copy, interpolate, average), one thread per new
  interior cell, running the per-cell bodies of :mod:`forestpy.patches.regrid`.

All array arguments must be device arrays (CuPy on a GPU; in Numba's CUDA simulator
NumPy arrays are the device arrays): a host NumPy array handed to a kernel on a real GPU
would be copied to the device and back at every launch, so :func:`fill_ghosts_gpu` and
:func:`physical_bc_side_gpu` refuse them.
"""

from __future__ import annotations

import weakref

import numpy as np

from forestpy.cuda_device import launch_stream

__all__ = ["THREADS", "kernels", "component_mask", "fill_ghosts_gpu", "launcher",
           "physical_bc_side_gpu", "transfer_gpu"]

THREADS = 256
_KERNELS: dict = {}
# ``numba.cuda``, bound on first use.  It must be a module global (not a local of
# kernels()): Numba's CUDA simulator swaps the module globals that refer to numba.cuda
# for its fake module (``cuda.grid`` and friends) while a simulated kernel runs.
cuda = None
_CONSTANTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def component_mask(backend, meqn: int, components):
    """Device boolean mask (meqn,) of ``components``, uploaded once per backend and value.

    Used for the positive components of the ghost fill and the components negated at
    walls, so that a step uploads nothing.
    """
    key = (int(meqn), tuple(sorted({int(c) for c in components})))
    per_backend = _CONSTANTS.setdefault(backend, {})
    mask = per_backend.get(key)
    if mask is None:
        host = np.zeros(meqn, dtype=np.bool_)
        host[list(key[1])] = True
        mask = per_backend[key] = backend.to_device(host)
    return mask


def _blocks(n: int) -> int:
    return (n + THREADS - 1) // THREADS


def kernels() -> dict:
    """The compiled CUDA kernels by name (built once per process)."""
    global cuda
    if _KERNELS:
        return _KERNELS
    import numba.cuda

    cuda = numba.cuda
    from forestpy.cuda_device import cuda_device
    from forestpy.patches import ghost_plan, regrid

    copy_entry = cuda_device(ghost_plan._copy_entry)
    average_entry = cuda_device(ghost_plan._average_entry)
    interpolate_entry = cuda_device(ghost_plan._interpolate_entry)

    @cuda.jit
    def fill_copy(q, dst, src):
        k = cuda.grid(1)
        if k < dst.shape[0]:
            copy_entry(q, dst, src, k)

    @cuda.jit
    def fill_average(q, dst, src):
        k = cuda.grid(1)
        if k < dst.shape[0]:
            average_entry(q, dst, src, k)

    @cuda.jit
    def fill_interpolate(q, dst, center, nbr, valid, offset, positive):
        k = cuda.grid(1)
        if k < dst.shape[0]:
            interpolate_entry(q, dst, center, nbr, valid, offset, positive, k)

    copy_cell = cuda_device(regrid._copy_cell)
    child_cell = cuda_device(regrid._child_cell)
    parent_cell = cuda_device(regrid._parent_cell)

    # regrid transfer: thread t is cell t % (my * mx) of the new patch t // (my * mx)
    @cuda.jit
    def transfer_copy(q_old, q_new, dst, src, mbc):
        my, mx = q_new.shape[2] - 2 * mbc, q_new.shape[3] - 2 * mbc
        t = cuda.grid(1)
        if t < dst.shape[0] * my * mx:
            k, c = t // (my * mx), t % (my * mx)
            copy_cell(q_old, q_new, dst, src, k, c // mx, c % mx, mbc)

    @cuda.jit
    def transfer_child(q_old, q_new, dst, src, quarter, mbc):
        my, mx = q_new.shape[2] - 2 * mbc, q_new.shape[3] - 2 * mbc
        t = cuda.grid(1)
        if t < dst.shape[0] * my * mx:
            k, c = t // (my * mx), t % (my * mx)
            child_cell(q_old, q_new, dst, src, quarter, k, c // mx, c % mx, mbc)

    @cuda.jit
    def transfer_parent(q_old, q_new, dst, kids, mbc):
        my, mx = q_new.shape[2] - 2 * mbc, q_new.shape[3] - 2 * mbc
        t = cuda.grid(1)
        if t < dst.shape[0] * my * mx:
            k, c = t // (my * mx), t % (my * mx)
            parent_cell(q_old, q_new, dst, kids, k, c // mx, c % mx, mbc)

    @cuda.jit
    def physical_bc_side(q, idx, x_side, lower, wall, negate, mbc):
        # thread t: patch idx[t // L], cell position t % L along the side (all L rows of
        # the padded patch for an x side, all L columns for a y side, ghost rows/columns
        # included, as the CPU path does)
        t = cuda.grid(1)
        L = q.shape[2] if x_side else q.shape[3]
        if t >= idx.shape[0] * L:
            return
        p = idx[t // L]
        pos = t % L
        n = q.shape[3] if x_side else q.shape[2]
        for g in range(mbc):
            if lower:
                ghost = mbc - 1 - g
                src = mbc + g if wall else mbc
            else:
                ghost = n - mbc + g
                src = n - mbc - 1 - g if wall else n - mbc - 1
            for m in range(q.shape[1]):
                if x_side:
                    v = q[p, m, pos, src]
                else:
                    v = q[p, m, src, pos]
                if wall and negate[m]:
                    v = -v
                if x_side:
                    q[p, m, pos, ghost] = v
                else:
                    q[p, m, ghost, pos] = v

    _KERNELS.update(
        fill_copy=fill_copy,
        fill_average=fill_average,
        fill_interpolate=fill_interpolate,
        physical_bc_side=physical_bc_side,
        transfer_copy=transfer_copy,
        transfer_child=transfer_child,
        transfer_parent=transfer_parent,
    )
    return _KERNELS


def _require_device(backend, *arrays) -> None:
    if getattr(backend, "simulator", False):
        return  # in the simulator NumPy arrays are the device arrays
    for a in arrays:
        if isinstance(a, np.ndarray):
            raise TypeError(
                "a GPU kernel received a host NumPy array: upload plans once per regrid "
                "(GhostPlan.to(backend), backend.to_device) and keep fields on the device"
            )


def fill_ghosts_gpu(plan, q, positive, backend=None, timers=None) -> None:
    """The three ghost-fill kernels over a plan of device arrays (empty lists skipped).

    ``positive`` is the device boolean mask (meqn,) of components clipped at zero;
    ``timers`` (optional) is charged per kind.
    """
    from forestpy.patches.ghost_plan import run_fill

    k = kernels()
    run_fill(plan, timers,
             copy=launcher(backend, k["fill_copy"], (q,)),
             average=launcher(backend, k["fill_average"], (q,)),
             interpolate=launcher(backend, k["fill_interpolate"], (q,), (positive,)))


def launcher(backend, kernel, before=(), after=()):
    """``launch(*entries)``: ``kernel`` over ``len(entries[0])`` entries, one thread
    each, on the patch-kernel stream, called with ``*before, *entries, *after`` (all
    checked to be device arrays first)."""

    def launch(*entries):
        args = (*before, *entries, *after)
        _require_device(backend, *(a for a in args if hasattr(a, "shape")))
        kernel[_blocks(len(entries[0])), THREADS, launch_stream()](*args)

    return launch


def physical_bc_side_gpu(q, idx, side: int, wall: bool, negate, mbc: int, backend=None) -> None:
    """Extrapolation or wall on ``side`` of the patches ``idx`` (device int64 array).

    ``negate`` is a device boolean mask (meqn,) of the components negated at a wall.
    """
    x_side = side < 2
    L = q.shape[2] if x_side else q.shape[3]
    n = len(idx) * L
    if n == 0:
        return
    _require_device(backend, q, idx, negate)
    kernels()["physical_bc_side"][_blocks(n), THREADS, launch_stream()](
        q, idx, x_side, side in (0, 2), bool(wall), negate, mbc
    )


def transfer_gpu(case: str, q_old, q_new, index, mbc: int, backend) -> None:
    """One case of the regrid transfer (``"copy"``, ``"child"``, ``"parent"``; see
    :func:`forestpy.patches.regrid.transfer`) into ``q_new``: one thread per new interior
    cell.  ``index``: the case's device index arrays (new rows first)."""
    _require_device(backend, q_old, q_new, *index)
    n = index[0].shape[0] * (q_new.shape[2] - 2 * mbc) * (q_new.shape[3] - 2 * mbc)
    kernels()[f"transfer_{case}"][_blocks(n), THREADS, launch_stream()](q_old, q_new, *index, mbc)
