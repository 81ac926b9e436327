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


def minmod_slopes(q: np.ndarray, mbc: int):
    """Minmod-limited slopes (per cell, in cell units) of the interiors of padded ``q``."""
    c = q[..., mbc:-mbc, mbc:-mbc]
    dxl = c - q[..., mbc:-mbc, mbc - 1 : -mbc - 1]
    dxr = q[..., mbc:-mbc, mbc + 1 : q.shape[-1] - mbc + 1] - c
    dyl = c - q[..., mbc - 1 : -mbc - 1, mbc:-mbc]
    dyr = q[..., mbc + 1 : q.shape[-2] - mbc + 1, mbc:-mbc] - c

    def mm(a, b):
        return np.where(a * b > 0.0, np.where(np.abs(a) < np.abs(b), a, b), 0.0)

    return mm(dxl, dxr), mm(dyl, dyr)


def transfer(old_forest, old_geom, q_old: np.ndarray, new_forest, new_geom) -> np.ndarray:
    """Return the new patch array (interiors filled, ghost cells zero).

    Vectorised over patches: one gather per case (copy, interpolate, average).
    Raises ``ValueError`` when a new leaf is more than one level away from the old
    leaves covering it.
    """
    mx, my, mbc = new_geom.mx, new_geom.my, new_geom.mbc
    npatch = new_geom.npatch
    meqn = q_old.shape[1]
    q_new = np.zeros((npatch, meqn) + new_geom.shape, dtype=q_old.dtype)
    gx, gy = new_forest.global_xy()
    old = old_forest.locate_global(gx, gy)
    dlev = new_geom.level - old_geom.level[old]
    if np.any(np.abs(dlev) > 1):
        raise ValueError("regrid changed a leaf by more than one level; refine level by level")

    same = np.flatnonzero(dlev == 0)
    # interiors only: the old ghost cells may be stale (their neighbours changed)
    q_new[same, :, mbc:-mbc, mbc:-mbc] = q_old[old[same], :, mbc:-mbc, mbc:-mbc]

    child = np.flatnonzero(dlev == 1)
    if len(child):
        parent = old[child]
        qp = q_old[parent]
        sx, sy = minmod_slopes(qp, mbc)
        qc = qp[:, :, mbc:-mbc, mbc:-mbc]
        cx = new_geom.gqx[child] - 2 * old_geom.gqx[parent]  # 0 or 1
        cy = new_geom.gqy[child] - 2 * old_geom.gqy[parent]
        fi = np.arange(mx)
        fj = np.arange(my)
        ci = cx[:, None] * (mx // 2) + fi[None, :] // 2  # (n, mx)
        cj = cy[:, None] * (my // 2) + fj[None, :] // 2  # (n, my)
        n = np.arange(len(child))[:, None, None]
        J, I = cj[:, :, None], ci[:, None, :]
        ox = ((fi % 2) - 0.5) * 0.5
        oy = ((fj % 2) - 0.5) * 0.5
        # advanced indices (n, J, I) around the eqn slice -> result (n, my, mx, meqn)
        val = (
            qc[n, :, J, I]
            + ox[None, None, :, None] * sx[n, :, J, I]
            + oy[None, :, None, None] * sy[n, :, J, I]
        )
        q_new[child, :, mbc:-mbc, mbc:-mbc] = np.moveaxis(val, 3, 1)

    par = np.flatnonzero(dlev == -1)
    if len(par):
        lvl = new_geom.level[par]
        half = np.left_shift(1, MAX_LEVEL - lvl - 1)
        for ox, oy in ((0, 0), (1, 0), (0, 1), (1, 1)):
            kids = old_forest.locate_global(gx[par] + ox * half, gy[par] + oy * half)
            if np.any(old_geom.level[kids] != lvl + 1):
                raise ValueError("coarsened leaf does not cover four children one level finer")
            qk = q_old[kids][:, :, mbc:-mbc, mbc:-mbc]
            avg = 0.25 * (
                (qk[:, :, 0::2, 0::2] + qk[:, :, 0::2, 1::2])
                + (qk[:, :, 1::2, 0::2] + qk[:, :, 1::2, 1::2])
            )
            r0, c0 = mbc + oy * (my // 2), mbc + ox * (mx // 2)
            q_new[par, :, r0 : r0 + my // 2, c0 : c0 + mx // 2] = avg
    return q_new
