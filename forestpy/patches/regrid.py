"""Regrid transfer: move field data from an old forest onto a new one, conservatively.

Each new leaf is matched with the old leaf covering its anchor (vectorised point
location on the host).  Unchanged leaves are copied; a new leaf one level finer than its
old leaf is *interpolated* (minmod-limited linear, offsets +-1/4 of a coarse cell, so the four
children average back to the parent cell); a new leaf one level coarser than the old
leaves is the *average* of its four children's 2 x 2 blocks.  Totals are therefore kept
to round-off, and refine-then-coarsen gives back the original cells to round-off.

The old patches' ghost cells must be filled before the transfer (slopes at patch edges
use them).
"""

from __future__ import annotations

import numba
import numpy as np

from forestpy.forest import MAX_LEVEL
from forestpy.patches.ghost_plan import _minmod
from forestpy.timers import phase

__all__ = ["transfer"]


# ---------------------------------------------------------------- per-cell bodies
# One cell (j, i) of the interior of new leaf k, every component; written once, run by
# the CPU loops below and, compiled by forestpy.cuda_device, by the CUDA kernels of
# forestpy.patches.launch (one thread per cell).


@numba.njit(inline="always")
def _copy_cell(q_old, q_new, dst, src, k, j, i, mbc):
    """Unchanged leaf: the interior cell from the old leaf (its ghost cells may be stale:
    their neighbours changed)."""
    for m in range(q_new.shape[1]):
        q_new[dst[k], m, mbc + j, mbc + i] = q_old[src[k], m, mbc + j, mbc + i]


@numba.njit(inline="always")
def _child_cell(q_old, q_new, dst, src, quarter, k, j, i, mbc):
    """Refined leaf (quarter ``(qx, qy)`` of its parent ``src[k]``): the parent cell plus
    minmod-limited slopes (parent ghost cells included) times the offset of the fine cell
    centre, +-1/4 of a parent cell."""
    my, mx = q_new.shape[2] - 2 * mbc, q_new.shape[3] - 2 * mbc
    J = mbc + quarter[k, 1] * (my // 2) + j // 2
    I = mbc + quarter[k, 0] * (mx // 2) + i // 2
    ox = (i % 2 - 0.5) * 0.5
    oy = (j % 2 - 0.5) * 0.5
    p = src[k]
    for m in range(q_new.shape[1]):
        c = q_old[p, m, J, I]
        sx = _minmod(c - q_old[p, m, J, I - 1], q_old[p, m, J, I + 1] - c)
        sy = _minmod(c - q_old[p, m, J - 1, I], q_old[p, m, J + 1, I] - c)
        q_new[dst[k], m, mbc + j, mbc + i] = c + ox * sx + oy * sy


@numba.njit(inline="always")
def _parent_cell(q_old, q_new, dst, kids, k, j, i, mbc):
    """Coarsened leaf: the mean of the 2 x 2 cells of the child covering the cell
    (``kids[k]``: the old children in the order (0, 0), (1, 0), (0, 1), (1, 1))."""
    my, mx = q_new.shape[2] - 2 * mbc, q_new.shape[3] - 2 * mbc
    ox = 1 if 2 * i >= mx else 0
    oy = 1 if 2 * j >= my else 0
    r = kids[k, 2 * oy + ox]
    jj = mbc + 2 * (j - oy * (my // 2))
    ii = mbc + 2 * (i - ox * (mx // 2))
    for m in range(q_new.shape[1]):
        q_new[dst[k], m, mbc + j, mbc + i] = 0.25 * (
            (q_old[r, m, jj, ii] + q_old[r, m, jj, ii + 1])
            + (q_old[r, m, jj + 1, ii] + q_old[r, m, jj + 1, ii + 1])
        )


@numba.njit(parallel=True, cache=True)
def _copy_cells(q_old, q_new, dst, src, mbc):
    for k in numba.prange(dst.shape[0]):
        for j in range(q_new.shape[2] - 2 * mbc):
            for i in range(q_new.shape[3] - 2 * mbc):
                _copy_cell(q_old, q_new, dst, src, k, j, i, mbc)


@numba.njit(parallel=True, cache=True)
def _child_cells(q_old, q_new, dst, src, quarter, mbc):
    for k in numba.prange(dst.shape[0]):
        for j in range(q_new.shape[2] - 2 * mbc):
            for i in range(q_new.shape[3] - 2 * mbc):
                _child_cell(q_old, q_new, dst, src, quarter, k, j, i, mbc)


@numba.njit(parallel=True, cache=True)
def _parent_cells(q_old, q_new, dst, kids, mbc):
    for k in numba.prange(dst.shape[0]):
        for j in range(q_new.shape[2] - 2 * mbc):
            for i in range(q_new.shape[3] - 2 * mbc):
                _parent_cell(q_old, q_new, dst, kids, k, j, i, mbc)


def transfer(old_forest, old_geom, q_old, new_forest, new_geom, backend=None,
             new_ids=None, old_rows=None, old_ids=None, timers=None):
    """Return the new patch array (interiors filled, ghost cells zero), q_old's dtype.

    ``new_ids`` (host int array, default all): only these new leaves are built, row
    ``k`` of the result being leaf ``new_ids[k]``; ``old_rows`` (host int array over
    the old leaves, default the identity): the row of ``q_old`` holding each old leaf
    (a distributed run holds only some of them, in a compact local order).  The
    per-patch arithmetic does not depend on either.  ``old_ids`` (host int array over
    every new leaf, optional): the old leaf containing each new leaf's lower-left
    corner, as :meth:`~forestpy.forest.Forest.adapt` gives it (located otherwise).
    ``timers``: the kernels are charged to ``regrid.transfer_cells``.

    One compiled pass per case (copy, interpolate, average), parallel over the new
    patches on the CPU; on the GPU backend the same per-cell bodies run as CUDA kernels,
    one thread per cell, and the fields stay on the device.  The index arrays are
    computed on the host from the forests (NumPy) and uploaded.  Raises ``ValueError``
    when a new leaf is more than one level away from the old leaves covering it (before
    any field data moves).
    """
    xp = np if backend is None else backend.xp

    def up(a):
        return a if backend is None else backend.to_device(a)

    mbc = new_geom.mbc
    meqn = q_old.shape[1]
    new_level, new_gqx, new_gqy = new_geom.level, new_geom.gqx, new_geom.gqy
    gx, gy = new_forest.global_xy()
    if old_ids is None:
        old_ids = old_forest.locate_global(gx, gy)
    old = old_ids
    if new_ids is not None:
        new_ids = np.asarray(new_ids, dtype=np.int64)
        gx, gy, old = gx[new_ids], gy[new_ids], old[new_ids]
        new_level, new_gqx, new_gqy = new_level[new_ids], new_gqx[new_ids], new_gqy[new_ids]
    npatch = len(new_level)

    def row(ids):  # old leaf ids -> rows of q_old
        return ids if old_rows is None else old_rows[ids]

    # ---- host: which old leaves feed which new ones
    dlev = new_level - old_geom.level[old]
    if np.any(np.abs(dlev) > 1):
        raise ValueError("regrid changed a leaf by more than one level; refine level by level")
    same = np.flatnonzero(dlev == 0)
    child = np.flatnonzero(dlev == 1)
    parent = old[child]
    par = np.flatnonzero(dlev == -1)
    kids = []
    if len(par):
        lvl = new_level[par]
        half = np.left_shift(1, MAX_LEVEL - lvl - 1)
        for ox, oy in ((0, 0), (1, 0), (0, 1), (1, 1)):
            k = old_forest.locate_global(gx[par] + ox * half, gy[par] + oy * half)
            if np.any(old_geom.level[k] != lvl + 1):
                raise ValueError("coarsened leaf does not cover four children one level finer")
            kids.append(k)

    # ---- field data: one pass per case, one cell per loop iteration / GPU thread
    q_new = xp.zeros((npatch, meqn) + new_geom.shape, dtype=q_old.dtype)
    cases = []
    if len(same):
        cases.append(("copy", same, row(old[same])))
    if len(child):
        quarter = np.stack([new_gqx[child] - 2 * old_geom.gqx[parent],
                            new_gqy[child] - 2 * old_geom.gqy[parent]], axis=1)  # 0 or 1
        cases.append(("child", child, row(parent), quarter))
    if len(par):
        cases.append(("parent", par, np.stack([row(k) for k in kids], axis=1)))
    if backend is not None and backend.is_gpu:
        from forestpy.patches.launch import launch_cells

        body = {"copy": _copy_cell, "child": _child_cell, "parent": _parent_cell}
        my, mx = new_geom.my, new_geom.mx
        cases = [(name, *[up(a) for a in index]) for name, *index in cases]
        with phase(timers, "regrid.transfer_cells"):
            for name, *index in cases:
                launch_cells(body[name], len(index[0]), my, mx, mbc, q_old, q_new, *index,
                             backend=backend)
        return q_new
    q_old = np.ascontiguousarray(q_old)
    run = {"copy": _copy_cells, "child": _child_cells, "parent": _parent_cells}
    with phase(timers, "regrid.transfer_cells"):
        for name, *index in cases:
            run[name](q_old, q_new, *index, mbc)
    return q_new
