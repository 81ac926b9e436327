"""The ghost-plan builder as first written, in vectorised NumPy (one point location
per ghost cell through ``Forest.locate_global``): the reference that the compiled
builder of :mod:`forestpy.patches.ghost_plan` must reproduce entry for entry
(``tests/core/patches/test_ghost_fill.py``)."""

from __future__ import annotations

import numpy as np

from forestpy.forest import MAX_LEVEL
from forestpy.patches.ghost_plan import GhostPlan, _ghost_template


def _wrap(Ix, Iy, level, geom):
    """Wrap periodic directions; return wrapped indices and an inside-domain mask."""
    NX, NY = geom.ncells_at(level)
    if geom.periodic_x:
        Ix = np.mod(Ix, NX)
    if geom.periodic_y:
        Iy = np.mod(Iy, NY)
    inside = (Ix >= 0) & (Ix < NX) & (Iy >= 0) & (Iy < NY)
    return Ix, Iy, inside


def _covering_leaf(forest, level, Ix, Iy, mx, my):
    """Leaf covering the level-``level`` cell ``(Ix, Iy)`` (wrapped, inside the domain).

    The point located is the anchor of the level ``level+1`` quadrant that contains the
    cell, so a covering leaf one level finer is found too.
    """
    Qx, ix = np.divmod(Ix, mx)
    Qy, iy = np.divmod(Iy, my)
    sh = MAX_LEVEL - level
    gX = np.left_shift(Qx, sh) + np.left_shift((2 * ix >= mx).astype(np.int64), sh - 1)
    gY = np.left_shift(Qy, sh) + np.left_shift((2 * iy >= my).astype(np.int64), sh - 1)
    leaf = forest.locate_global(gX, gY)
    if np.any(leaf < 0):
        raise RuntimeError("internal error: an inside-domain cell found no covering leaf")
    return leaf


def _value_sources(forest, geom, level, Ix, Iy):
    """Sources of the level-``level`` average over cell (Ix, Iy): (valid, src[n, 4, 3]).

    Cells covered at their own level are copies (the same source four times), cells
    covered one level finer are 2 x 2 averages; cells outside the domain are invalid.
    """
    mx, my, mbc = geom.mx, geom.my, geom.mbc
    Ix, Iy, valid = _wrap(Ix, Iy, level, geom)
    src = np.zeros((len(Ix), 4, 3), dtype=np.int64)
    if not np.any(valid):
        return valid, src
    v = np.flatnonzero(valid)
    lv, ix, iy = level[v], Ix[v], Iy[v]
    leaf = _covering_leaf(forest, lv, ix, iy, mx, my)
    dlev = geom.level[leaf] - lv
    if np.any((dlev != 0) & (dlev != 1)):
        raise ValueError(
            "ghost stencil reaches a leaf two levels away: the forest is not 2:1 balanced "
            "across faces and corners, or mbc is too large for mx"
        )
    same = dlev == 0
    fine = ~same
    s = np.empty((len(v), 4, 3), dtype=np.int64)
    s[:, :, 0] = leaf[:, None]
    s[same, :, 1] = (iy[same] - geom.gqy[leaf[same]] * my + mbc)[:, None]
    s[same, :, 2] = (ix[same] - geom.gqx[leaf[same]] * mx + mbc)[:, None]
    lf = leaf[fine]
    for c, (ox, oy) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
        s[fine, c, 1] = 2 * iy[fine] + oy - geom.gqy[lf] * my + mbc
        s[fine, c, 2] = 2 * ix[fine] + ox - geom.gqx[lf] * mx + mbc
    src[v] = s
    return valid, src


def build_ghost_plan_reference(forest, geom) -> GhostPlan:
    """Classify every in-domain ghost cell of every patch; see the module docstring.

    Collective over the whole forest; host arrays; cost O(npatch * ghost cells) in
    vectorised NumPy.
    """
    mx, my, mbc = geom.mx, geom.my, geom.mbc
    gj, gi = _ghost_template(mx, my, mbc)
    npatch, ng = geom.npatch, len(gj)
    p = np.repeat(np.arange(npatch, dtype=np.int64), ng)
    j = np.tile(gj, npatch).astype(np.int64)
    i = np.tile(gi, npatch).astype(np.int64)
    level = geom.level[p]
    Ix = geom.gqx[p] * mx + (i - mbc)
    Iy = geom.gqy[p] * my + (j - mbc)
    Ix, Iy, inside = _wrap(Ix, Iy, level, geom)
    p, j, i, level, Ix, Iy = (a[inside] for a in (p, j, i, level, Ix, Iy))

    leaf = _covering_leaf(forest, level, Ix, Iy, mx, my)
    dlev = geom.level[leaf] - level
    if np.any(np.abs(dlev) > 1):
        raise ValueError(
            "a ghost cell is covered by a leaf two or more levels away: the forest is not "
            "2:1 balanced across faces and corners, or mbc is too large for mx"
        )
    dst = np.stack([p, j, i], axis=1)

    same = dlev == 0
    ls = leaf[same]
    copy_src = np.stack(
        [ls, Iy[same] - geom.gqy[ls] * my + mbc, Ix[same] - geom.gqx[ls] * mx + mbc], axis=1
    )

    finer = dlev == 1
    _, avg_src = _value_sources(forest, geom, level[finer], Ix[finer], Iy[finer])

    coarser = dlev == -1
    lc = leaf[coarser]
    cl = level[coarser] - 1
    Cx, Cy = Ix[coarser] // 2, Iy[coarser] // 2
    center = np.stack([lc, Cy - geom.gqy[lc] * my + mbc, Cx - geom.gqx[lc] * mx + mbc], axis=1)
    nbr = np.zeros((len(lc), 4, 4, 3), dtype=np.int64)
    valid = np.zeros((len(lc), 4), dtype=bool)
    for k, (ox, oy) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
        valid[:, k], nbr[:, k] = _value_sources(forest, geom, cl, Cx + ox, Cy + oy)
    offset = np.stack([(Ix[coarser] % 2 - 0.5) * 0.5, (Iy[coarser] % 2 - 0.5) * 0.5], axis=1)

    return GhostPlan(
        copy_dst=dst[same],
        copy_src=copy_src,
        avg_dst=dst[finer],
        avg_src=avg_src,
        interp_dst=dst[coarser],
        interp_center=center,
        interp_nbr=nbr,
        interp_valid=valid,
        interp_offset=offset,
    )
