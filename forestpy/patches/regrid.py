"""Regrid transfer: move field data from an old forest onto a new one, conservatively.

Each new leaf is matched with the old leaf covering its anchor (vectorised point
location).  Unchanged leaves are copied; a new leaf one level finer than its old leaf
is *interpolated* (minmod-limited linear, offsets +-1/4 of a coarse cell, so the four
children average back to the parent cell); a new leaf one level coarser than the old
leaves is the *average* of its four children's 2 x 2 blocks.  Totals are therefore kept
to round-off, and refine-then-coarsen gives back the original cells to round-off.

The old patches' ghost cells must be filled before the transfer (slopes at patch edges
use them).
"""

from __future__ import annotations

import numpy as np

from forestpy.forest import MAX_LEVEL

__all__ = ["transfer", "minmod_slopes"]


def minmod_slopes(q, mbc: int, xp=np):
    """Minmod-limited slopes (per cell, in cell units) of the interiors of padded ``q``
    (an ``xp`` array: NumPy, or CuPy on the GPU backend)."""
    c = q[..., mbc:-mbc, mbc:-mbc]
    dxl = c - q[..., mbc:-mbc, mbc - 1 : -mbc - 1]
    dxr = q[..., mbc:-mbc, mbc + 1 : q.shape[-1] - mbc + 1] - c
    dyl = c - q[..., mbc - 1 : -mbc - 1, mbc:-mbc]
    dyr = q[..., mbc + 1 : q.shape[-2] - mbc + 1, mbc:-mbc] - c

    def mm(a, b):
        return xp.where(a * b > 0.0, xp.where(xp.abs(a) < xp.abs(b), a, b), 0.0)

    return mm(dxl, dxr), mm(dyl, dyr)


def transfer(old_forest, old_geom, q_old, new_forest, new_geom, backend=None,
             new_ids=None, old_rows=None):
    """Return the new patch array (interiors filled, ghost cells zero), q_old's dtype.

    ``new_ids`` (host int array, default all): only these new leaves are built, row
    ``k`` of the result being leaf ``new_ids[k]``; ``old_rows`` (host int array over
    the old leaves, default the identity): the row of ``q_old`` holding each old leaf
    (a distributed run holds only some of them, in a compact local order).  The
    per-patch arithmetic does not depend on either.

    Vectorised over patches: one gather per case (copy, interpolate, average).  The
    index arrays are computed on the host from the forests (NumPy) and uploaded; all
    field data moves with the backend's ``xp`` (``backend`` None: NumPy), so on the GPU
    the fields stay on the device.  Raises ``ValueError`` when a new leaf is more than
    one level away from the old leaves covering it (before any field data moves).
    """
    xp = np if backend is None else backend.xp

    def up(a):
        return a if backend is None else backend.to_device(a)

    mx, my, mbc = new_geom.mx, new_geom.my, new_geom.mbc
    meqn = q_old.shape[1]
    new_level, new_gqx, new_gqy = new_geom.level, new_geom.gqx, new_geom.gqy
    gx, gy = new_forest.global_xy()
    if new_ids is not None:
        new_ids = np.asarray(new_ids, dtype=np.int64)
        gx, gy = gx[new_ids], gy[new_ids]
        new_level, new_gqx, new_gqy = new_level[new_ids], new_gqx[new_ids], new_gqy[new_ids]
    npatch = len(new_level)

    def row(ids):  # old leaf ids -> rows of q_old
        return ids if old_rows is None else old_rows[ids]

    # ---- host: which old leaves feed which new ones
    old = old_forest.locate_global(gx, gy)
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

    # ---- backend: field data
    q_new = xp.zeros((npatch, meqn) + new_geom.shape, dtype=q_old.dtype)
    inner = (slice(None), slice(mbc, -mbc), slice(mbc, -mbc))
    if len(same):
        # interiors only: the old ghost cells may be stale (their neighbours changed)
        q_new[(up(same),) + inner] = q_old[(up(row(old[same])),) + inner]

    if len(child):
        qp = q_old[up(row(parent))]
        sx, sy = minmod_slopes(qp, mbc, xp)
        qc = qp[:, :, mbc:-mbc, mbc:-mbc]
        cx = new_gqx[child] - 2 * old_geom.gqx[parent]  # 0 or 1
        cy = new_gqy[child] - 2 * old_geom.gqy[parent]
        fi = np.arange(mx)
        fj = np.arange(my)
        ci = cx[:, None] * (mx // 2) + fi[None, :] // 2  # (n, mx)
        cj = cy[:, None] * (my // 2) + fj[None, :] // 2  # (n, my)
        n = up(np.arange(len(child))[:, None, None])
        J, I = up(cj[:, :, None]), up(ci[:, None, :])
        ox = up(((fi % 2) - 0.5) * 0.5)
        oy = up(((fj % 2) - 0.5) * 0.5)
        # advanced indices (n, J, I) around the eqn slice -> result (n, my, mx, meqn)
        val = (
            qc[n, :, J, I]
            + ox[None, None, :, None] * sx[n, :, J, I]
            + oy[None, :, None, None] * sy[n, :, J, I]
        )
        q_new[(up(child),) + inner] = xp.moveaxis(val, 3, 1)

    if len(par):
        par_d = up(par)
        for (ox, oy), k in zip(((0, 0), (1, 0), (0, 1), (1, 1)), kids):
            qk = q_old[(up(row(k)),) + inner]
            avg = 0.25 * (
                (qk[:, :, 0::2, 0::2] + qk[:, :, 0::2, 1::2])
                + (qk[:, :, 1::2, 0::2] + qk[:, :, 1::2, 1::2])
            )
            r0, c0 = mbc + oy * (my // 2), mbc + ox * (mx // 2)
            q_new[par_d, :, r0 : r0 + my // 2, c0 : c0 + mx // 2] = avg
    return q_new
