"""Ghost-fill plans: built once per regrid from the forest, executed every step.

Every ghost cell of every patch is classified by the leaf that covers it, found by a
binary search on the leaves' Morton keys, in two compiled passes parallel over the
patches (classify and count, then fill; no Python loop over patches or faces):

* **copy** -- covered by a leaf of the same level: one interior cell of that leaf.
* **average** -- covered by a leaf one level finer: the mean of 2 x 2 interior cells.
* **interpolate** -- covered by a leaf one level coarser: the coarse cell value plus
  minmod-limited slopes times the offset of the ghost cell centre (+-1/4 of a coarse
  cell).  The slopes use coarse-level values of the coarse cell's four neighbours,
  each itself a copy or a 2 x 2 average of interior cells, or one-sided where the
  neighbour lies outside the physical domain.  For linear data the two one-sided
  differences agree, so the interpolant reproduces linear fields exactly.

Because every source is an *interior* cell, the three lists have no ordering
dependency.  Ghost cells outside the physical domain (non-periodic sides) are left to
:mod:`forestpy.patches.boundary`, which runs afterwards.

The forest must be 2:1 balanced across faces and corners and ``mbc <= mx/2``; a ghost
cell covered by a leaf two or more levels away raises ``ValueError``.

Execution: the per-entry work is three ``numba.njit`` bodies (``_copy_entry``,
``_average_entry``, ``_interpolate_entry``), written once.  On the CPU they run in Numba
loops parallel over the entries; on the GPU backend (plan uploaded once per regrid with
:meth:`GhostPlan.to`) the same bodies, compiled by :func:`forestpy.cuda_device.cuda_device`,
run in CUDA kernels with one thread per entry (:mod:`forestpy.patches.launch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from forestpy.forest import MAX_LEVEL
from forestpy.forest.quadrants import spread_bits
from forestpy.timers import phase

__all__ = ["GhostPlan", "build_ghost_plan", "fill_ghosts", "plan_entries", "positive_mask"]


@dataclass
class GhostPlan:
    """Index lists of one ghost fill; ``(p, j, i)`` triplets (int32) into ``q[p, :, j, i]``.

    ``copy_dst``/``copy_src``: (n, 3). ``avg_dst``: (n, 3), ``avg_src``: (n, 4) 2 x 2
    blocks (below). ``interp_dst``: (n, 3), ``interp_center``: (n, 3), ``interp_nbr``:
    (n, 4, 4) blocks for the x-, x+, y-, y+ neighbours, ``interp_valid``: (n, 4) bool,
    ``interp_offset``: (n, 2) float offsets in coarse-cell units.

    A *block* ``(p, j, i, s)`` is the 4 cells ``(p, j + a s, i + b s)``, ``a, b`` in
    {0, 1}, averaged (:func:`_block_cell`): ``s = 1`` a 2 x 2 block of finer cells,
    ``s = 0`` one cell of the same level (its mean is the cell value, exactly).
    """

    copy_dst: np.ndarray
    copy_src: np.ndarray
    avg_dst: np.ndarray
    avg_src: np.ndarray
    interp_dst: np.ndarray
    interp_center: np.ndarray
    interp_nbr: np.ndarray
    interp_valid: np.ndarray
    interp_offset: np.ndarray

    def to(self, backend) -> GhostPlan:
        """This plan with every array a ``backend`` array (uploaded once per regrid)."""
        return GhostPlan(**{
            name: backend.to_device(getattr(self, name)) for name in self.__dataclass_fields__
        })

    @property
    def counts(self) -> dict:
        return {
            "copy": len(self.copy_dst),
            "average": len(self.avg_dst),
            "interpolate": len(self.interp_dst),
        }


def _ghost_template(mx: int, my: int, mbc: int):
    jj, ii = np.mgrid[0 : my + 2 * mbc, 0 : mx + 2 * mbc]
    ghost = (ii < mbc) | (ii >= mx + mbc) | (jj < mbc) | (jj >= my + mbc)
    return jj[ghost], ii[ghost]


# Kinds of a ghost cell (``_classify``): outside the domain (left to the physical
# boundary conditions), covered at its own level, one level finer or coarser, or by a
# leaf two or more levels away (an error).
_OUTSIDE, _SAME, _FINER, _COARSER, _TOO_FAR = -1, 0, 1, 2, 3


_spread = numba.njit(inline="always")(spread_bits)  # the Morton interleave, compiled


@numba.njit(inline="always")
def _wrap_cell(Ix, Iy, level, g):
    """Wrap the level-``level`` cell ``(Ix, Iy)`` in periodic directions; returns
    ``(Ix, Iy, inside)``.  ``g``: (trees_x, trees_y, periodic_x, periodic_y, mx, my)."""
    NX = g[0] * g[4] << level
    NY = g[1] * g[5] << level
    if g[2]:
        Ix %= NX
    if g[3]:
        Iy %= NY
    return Ix, Iy, Ix >= 0 and Ix < NX and Iy >= 0 and Iy < NY


@numba.njit(inline="always")
def _cell_key(g, level, Ix, Iy):
    """Morton key of the anchor of the level ``level+1`` quadrant that contains the
    level-``level`` cell ``(Ix, Iy)`` (wrapped, inside the domain)."""
    mx, my = g[4], g[5]
    Qx = Ix // mx
    Qy = Iy // my
    sh = MAX_LEVEL - level
    gX = (Qx << sh) + ((1 if 2 * (Ix - Qx * mx) >= mx else 0) << (sh - 1))
    gY = (Qy << sh) + ((1 if 2 * (Iy - Qy * my) >= my else 0) << (sh - 1))
    tree = (gY >> MAX_LEVEL) * g[0] + (gX >> MAX_LEVEL)
    mask = (1 << MAX_LEVEL) - 1
    return (tree << (2 * MAX_LEVEL)) + (_spread(gX & mask) | (_spread(gY & mask) << 1))


@numba.njit(inline="always")
def _leaf_of_key(keys, key):
    """The leaf holding ``key``: the last with a key ``<= key`` (binary search)."""
    lo, hi = 0, len(keys)  # first leaf with a key > key, minus one
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@numba.njit(inline="always")
def _covering_leaf(keys, g, level, Ix, Iy):
    """Leaf covering the level-``level`` cell ``(Ix, Iy)`` (wrapped, inside the domain):
    the leaf holding the anchor of the level ``level+1`` quadrant that contains the cell,
    so that a covering leaf one level finer is found too (binary search on the sorted
    Morton keys of the leaves, as :meth:`forestpy.forest.Forest.locate_global` does for
    arrays of points)."""
    return _leaf_of_key(keys, _cell_key(g, level, Ix, Iy))


@numba.njit(inline="always")
def _set_block(out, leaf, d, Ix, Iy, g, gqx, gqy, mbc):
    """``out[4]``: the block of the level-``level`` cell ``(Ix, Iy)`` in its covering
    ``leaf``, ``d`` (0 or 1) levels finer: the cell itself, or its 2 x 2 finer cells."""
    out[0] = leaf
    out[1] = (Iy << d) - gqy[leaf] * g[5] + mbc
    out[2] = (Ix << d) - gqx[leaf] * g[4] + mbc
    out[3] = d


@numba.njit(inline="always")
def _value_source(keys, g, lvl, gqx, gqy, mbc, level, Ix, Iy, out):
    """The block (see :class:`GhostPlan`) whose mean is the level-``level`` value of the
    cell ``(Ix, Iy)``, into ``out[4]``: the cell itself where a leaf of that level
    covers it, the 2 x 2 cells of a leaf one level finer; returns 1 (valid), 0 (outside
    the domain, ``out`` left as is) or -1 (a leaf two or more levels away)."""
    Ix, Iy, inside = _wrap_cell(Ix, Iy, level, g)
    if not inside:
        return 0
    leaf = _covering_leaf(keys, g, level, Ix, Iy)
    d = lvl[leaf] - level
    if d == 0 or d == 1:
        _set_block(out, leaf, d, Ix, Iy, g, gqx, gqy, mbc)
        return 1
    return -1


@numba.njit(inline="always")
def _value_source_near(keys, g, lvl, gqx, gqy, mbc, level, Ix, Iy, out, near):
    """:func:`_value_source`, first trying the leaf ``near`` (-1: none; the previous
    entry's leaf in the same direction, usually the same one): where that leaf, of
    this level or one finer, contains the cell it is the covering leaf and no search
    is made."""
    if near >= 0:
        Jx, Jy, inside = _wrap_cell(Ix, Iy, level, g)
        d = lvl[near] - level
        if inside and (d == 0 or d == 1):
            x0 = (gqx[near] * g[4]) >> d
            y0 = (gqy[near] * g[5]) >> d
            if x0 <= Jx < x0 + (g[4] >> d) and y0 <= Jy < y0 + (g[5] >> d):
                _set_block(out, near, d, Jx, Jy, g, gqx, gqy, mbc)
                return 1
    return _value_source(keys, g, lvl, gqx, gqy, mbc, level, Ix, Iy, out)


def _ghost_regions(gj, gi, mx: int, my: int, mbc: int):
    """``(region, cell, size)``: the region (0..15) of each template ghost cell, and per
    region its first template cell (-1 for the four interior regions) and its number of
    cells.  A region is a band of columns (left of the interior, its left half, its
    right half, right of it) times a band of rows: all its cells lie in one quadrant one
    level finer than the patch (``mbc <= mx / 2``), so one leaf covers them all, or
    none (outside the domain)."""

    def band(c, m):
        return np.where(c < mbc, 0, np.where(c < mbc + m // 2, 1, np.where(c < mbc + m, 2, 3)))

    region = (4 * band(gj, my) + band(gi, mx)).astype(np.int64)
    cell = np.full(16, -1, dtype=np.int64)
    seen, at = np.unique(region, return_index=True)
    cell[seen] = at
    return region, cell, np.bincount(region, minlength=16).astype(np.int64)


@numba.njit(inline="always")
def _classify_patch(keys, g, lvl, gqx, gqy, mbc, gj, gi, region_cell, region_size, patches,
                    kind, cover, counts, r):
    """Kind of each ghost region ``(r, reg)`` of patch ``patches[r]`` (see
    :func:`_ghost_regions`) and its covering leaf (left unset outside the domain): one
    search each, from the region's first cell; ``counts[r]``: the in-domain ghost cells
    of each kind (same, finer, coarser, too far)."""
    mx, my = g[4], g[5]
    p = patches[r]
    level = lvl[p]
    for c in range(4):
        counts[r, c] = 0
    for reg in range(16):
        t = region_cell[reg]
        kind[r, reg] = _OUTSIDE
        if t < 0:  # an interior region
            continue
        Ix, Iy, inside = _wrap_cell(gqx[p] * mx + gi[t] - mbc, gqy[p] * my + gj[t] - mbc,
                                    level, g)
        if not inside:
            continue
        leaf = _covering_leaf(keys, g, level, Ix, Iy)
        cover[r, reg] = leaf
        d = lvl[leaf] - level
        k = _SAME if d == 0 else (_FINER if d == 1 else (_COARSER if d == -1 else _TOO_FAR))
        kind[r, reg] = k
        counts[r, k] += region_size[reg]


@numba.njit(inline="always")
def _fill_plan_patch(keys, g, lvl, gqx, gqy, mbc, gj, gi, region, patches, kind, cover, first,
                     copy_dst, copy_src, avg_dst, avg_src, interp_dst, center, nbr, valid,
                     offset, bad, r):
    """The plan's entries of patch ``patches[r]`` (``first[r]``: each kind's first
    entry of it), in the order of the ghost template; ``bad[r]`` set where an
    interpolation stencil reaches a leaf two levels away."""
    mx, my = g[4], g[5]
    p = patches[r]
    level = lvl[p]
    n_copy, n_avg, n_int = first[r, 0], first[r, 1], first[r, 2]
    for t in range(len(gj)):
        k = kind[r, region[t]]
        if k == _OUTSIDE:
            continue
        Ix, Iy, _ = _wrap_cell(gqx[p] * mx + gi[t] - mbc, gqy[p] * my + gj[t] - mbc,
                               level, g)
        leaf = cover[r, region[t]]
        if k == _SAME:
            e = n_copy
            n_copy += 1
            copy_dst[e, 0], copy_dst[e, 1], copy_dst[e, 2] = p, gj[t], gi[t]
            copy_src[e, 0] = leaf
            copy_src[e, 1] = Iy - gqy[leaf] * my + mbc
            copy_src[e, 2] = Ix - gqx[leaf] * mx + mbc
        elif k == _FINER:
            e = n_avg
            n_avg += 1
            avg_dst[e, 0], avg_dst[e, 1], avg_dst[e, 2] = p, gj[t], gi[t]
            _set_block(avg_src[e], leaf, 1, Ix, Iy, g, gqx, gqy, mbc)
        else:
            e = n_int
            n_int += 1
            interp_dst[e, 0], interp_dst[e, 1], interp_dst[e, 2] = p, gj[t], gi[t]
            Cx, Cy = Ix // 2, Iy // 2
            center[e, 0] = leaf
            center[e, 1] = Cy - gqy[leaf] * my + mbc
            center[e, 2] = Cx - gqx[leaf] * mx + mbc
            for n in range(4):  # x-, x+, y-, y+
                ox = -1 if n == 0 else (1 if n == 1 else 0)
                oy = -1 if n == 2 else (1 if n == 3 else 0)
                near = nbr[e - 1, n, 0] if e > first[r, 2] and valid[e - 1, n] else -1
                got = _value_source_near(keys, g, lvl, gqx, gqy, mbc, level - 1, Cx + ox,
                                         Cy + oy, nbr[e, n], near)
                valid[e, n] = got == 1
                if got < 0:
                    bad[r] = True
            offset[e, 0] = (Ix % 2 - 0.5) * 0.5
            offset[e, 1] = (Iy % 2 - 0.5) * 0.5


@numba.njit(parallel=True, cache=True)
def _classify(keys, g, lvl, gqx, gqy, mbc, gj, gi, region_cell, region_size, patches, kind,
              cover, counts):
    for r in numba.prange(len(patches)):
        _classify_patch(keys, g, lvl, gqx, gqy, mbc, gj, gi, region_cell, region_size,
                        patches, kind, cover, counts, r)


@numba.njit(parallel=True, cache=True)
def _fill_plan(keys, g, lvl, gqx, gqy, mbc, gj, gi, region, patches, kind, cover, first,
               copy_dst, copy_src, avg_dst, avg_src, interp_dst, center, nbr, valid, offset,
               bad):
    for r in numba.prange(len(patches)):
        _fill_plan_patch(keys, g, lvl, gqx, gqy, mbc, gj, gi, region, patches, kind, cover,
                         first,
                         copy_dst, copy_src, avg_dst, avg_src, interp_dst, center, nbr,
                         valid, offset, bad, r)


def build_ghost_plan(forest, geom, patches=None, backend=None) -> GhostPlan:
    """Classify every in-domain ghost cell of every patch; see the module docstring.

    ``patches`` (increasing leaf ids, default all): only the ghost cells of these
    patches (a distributed run: the owned ones), the entries being those of the whole
    plan whose destination is one of them.  Not collective.  Two compiled passes
    parallel over the patches (classify and count, then fill), O(patches * ghost
    cells); the entries of each kind are ordered by patch, then by ghost cell
    (row-major).

    ``backend`` None or a CPU backend: host arrays, built by Numba loops.  A GPU
    backend: the same bodies run as CUDA kernels, one thread per patch, on the keys and
    quadrant coordinates of the leaves (a few bytes per leaf uploaded); the plan is
    made on the device and never crosses the bus (two small records come back: the
    entry counts and the balance check).
    """
    mx, my, mbc = geom.mx, geom.my, geom.mbc
    gj, gi = (a.astype(np.int64) for a in _ghost_template(mx, my, mbc))
    region, region_cell, region_size = _ghost_regions(gj, gi, mx, my, mbc)
    g = np.array([geom.trees_x, geom.trees_y, int(geom.periodic_x), int(geom.periodic_y),
                  mx, my], dtype=np.int64)
    keys = np.ascontiguousarray(forest.keys, dtype=np.int64)
    lvl, gqx, gqy = (np.ascontiguousarray(a, dtype=np.int64)
                     for a in (geom.level, geom.gqx, geom.gqy))
    patches = np.arange(len(lvl)) if patches is None else np.asarray(patches)
    patches = np.ascontiguousarray(patches, dtype=np.int64)
    gpu = backend is not None and backend.is_gpu
    if gpu:
        from forestpy.patches.launch import launch

        xp, up, to_host = backend.xp, backend.to_device, backend.to_host
        keys, g, lvl, gqx, gqy, gj, gi, region, region_cell, region_size, patches = (
            up(a) for a in (keys, g, lvl, gqx, gqy, gj, gi, region, region_cell, region_size,
                            patches))
    else:
        xp, up, to_host = np, np.asarray, np.asarray
    npatch = len(patches)
    kind = xp.empty((npatch, 16), dtype=np.int8)  # per ghost region (_ghost_regions)
    cover = xp.empty((npatch, 16), dtype=np.int64)
    counts = xp.empty((npatch, 4), dtype=np.int64)  # same, finer, coarser, too far
    head = (keys, g, lvl, gqx, gqy, mbc, gj, gi)
    classify = (*head, region_cell, region_size, patches, kind, cover, counts)
    if gpu:
        launch(_classify_patch, npatch, *classify, backend=backend)
    else:
        _classify(*classify)
    first = xp.zeros((npatch, 3), dtype=np.int64)
    if npatch:
        first[1:] = xp.cumsum(counts[:-1, :3], axis=0)
    # one record to the host: the entry counts (array sizes) and the balance check
    record = to_host(counts.sum(axis=0))
    if record[3]:
        raise ValueError(
            "a ghost cell is covered by a leaf two or more levels away: the forest is not "
            "2:1 balanced across faces and corners, or mbc is too large for mx"
        )
    n_copy, n_avg, n_int = (int(c) for c in record[:3])
    idx = np.int32  # half the plan's memory and index traffic of int64
    plan = GhostPlan(
        copy_dst=xp.empty((n_copy, 3), dtype=idx),
        copy_src=xp.empty((n_copy, 3), dtype=idx),
        avg_dst=xp.empty((n_avg, 3), dtype=idx),
        avg_src=xp.empty((n_avg, 4), dtype=idx),
        interp_dst=xp.empty((n_int, 3), dtype=idx),
        interp_center=xp.empty((n_int, 3), dtype=idx),
        interp_nbr=xp.zeros((n_int, 4, 4), dtype=idx),
        interp_valid=xp.zeros((n_int, 4), dtype=bool),
        interp_offset=xp.empty((n_int, 2), dtype=np.float64),
    )
    bad = xp.zeros(npatch, dtype=bool)
    entries = (*head, region, patches, kind, cover, first, plan.copy_dst, plan.copy_src,
               plan.avg_dst, plan.avg_src, plan.interp_dst, plan.interp_center,
               plan.interp_nbr, plan.interp_valid, plan.interp_offset, bad)
    if gpu:
        launch(_fill_plan_patch, npatch, *entries, backend=backend)
    else:
        _fill_plan(*entries)
    if bool(to_host(bad.any())):
        raise ValueError(
            "ghost stencil reaches a leaf two levels away: the forest is not 2:1 balanced "
            "across faces and corners, or mbc is too large for mx"
        )
    return plan


# --------------------------------------------------------------------------------------
# per-entry bodies: written once, called from the CPU prange loops below and, compiled by
# forestpy.cuda_device, by forestpy.patches.launch (one CUDA thread per entry)
# --------------------------------------------------------------------------------------


@numba.njit(inline="always")
def _block_cell(b, c):
    """Cell ``c`` (0..3: (0, 0), (0, 1), (1, 0), (1, 1) as (a, b) in row, column) of the
    block ``b = (p, j, i, s)``: ``(p, j + a s, i + b s)``."""
    return b[0], b[1] + (c >> 1) * b[3], b[2] + (c & 1) * b[3]


@numba.njit(inline="always")
def _block_mean(q, m, b):
    """Mean of component ``m`` over the 4 cells of the block ``b`` (pairs by rows)."""
    p0, j0, i0 = _block_cell(b, 0)
    p1, j1, i1 = _block_cell(b, 1)
    p2, j2, i2 = _block_cell(b, 2)
    p3, j3, i3 = _block_cell(b, 3)
    return 0.25 * ((q[p0, m, j0, i0] + q[p1, m, j1, i1]) + (q[p2, m, j2, i2] + q[p3, m, j3, i3]))


@numba.njit(inline="always")
def _minmod(a, b):
    if a * b <= 0.0:
        return 0.0
    return a if abs(a) < abs(b) else b


@numba.njit(inline="always")
def _limited_slope(qc, vm, vp, has_m, has_p):
    if has_m and has_p:
        return _minmod(qc - vm, vp - qc)
    if has_m:
        return qc - vm
    if has_p:
        return vp - qc
    return 0.0


@numba.njit(inline="always")
def _copy_entry(q, dst, src, k):
    """Copy entry ``k``: every component of the ghost cell ``dst[k]`` from ``src[k]``."""
    for m in range(q.shape[1]):
        q[dst[k, 0], m, dst[k, 1], dst[k, 2]] = q[src[k, 0], m, src[k, 1], src[k, 2]]


@numba.njit(inline="always")
def _average_entry(q, dst, src, k):
    """Average entry ``k``: the mean of the 2 x 2 fine cells of the block ``src[k]``."""
    for m in range(q.shape[1]):
        q[dst[k, 0], m, dst[k, 1], dst[k, 2]] = _block_mean(q, m, src[k])


@numba.njit(inline="always")
def _interpolate_entry(q, dst, center, nbr, valid, offset, positive, k):
    """Interpolation entry ``k``: coarse value plus limited slopes times the offsets."""
    c0, c1, c2 = center[k, 0], center[k, 1], center[k, 2]
    for m in range(q.shape[1]):
        qc = q[c0, m, c1, c2]
        sx = _limited_slope(
            qc, _block_mean(q, m, nbr[k, 0]), _block_mean(q, m, nbr[k, 1]), valid[k, 0],
            valid[k, 1]
        )
        sy = _limited_slope(
            qc, _block_mean(q, m, nbr[k, 2]), _block_mean(q, m, nbr[k, 3]), valid[k, 2],
            valid[k, 3]
        )
        value = qc + offset[k, 0] * sx + offset[k, 1] * sy
        # a one-sided slope at a physical boundary is unlimited (so linear data stays
        # exact) and may overshoot: never let it make a depth or density negative
        if positive[m] and value < 0.0 <= qc:
            value = 0.0
        q[dst[k, 0], m, dst[k, 1], dst[k, 2]] = value


@numba.njit(parallel=True, cache=True)
def _fill_copy(q, dst, src):
    for k in numba.prange(dst.shape[0]):
        _copy_entry(q, dst, src, k)


@numba.njit(parallel=True, cache=True)
def _fill_average(q, dst, src):
    for k in numba.prange(dst.shape[0]):
        _average_entry(q, dst, src, k)


@numba.njit(parallel=True, cache=True)
def _fill_interpolate(q, dst, center, nbr, valid, offset, positive):
    for k in numba.prange(dst.shape[0]):
        _interpolate_entry(q, dst, center, nbr, valid, offset, positive, k)


def positive_mask(meqn: int, positive=(), backend=None):
    """Boolean mask (meqn,) of the components listed in ``positive`` (a backend array
    when ``backend`` is given)."""
    mask = np.zeros(meqn, dtype=np.bool_)
    mask[list(positive)] = True
    return mask if backend is None else backend.to_device(mask)


def _is_mask(positive, meqn: int) -> bool:
    dtype = getattr(positive, "dtype", None)
    return dtype is not None and dtype == np.bool_ and tuple(positive.shape) == (meqn,)


def fill_ghosts(plan: GhostPlan, q, positive=(), backend=None, timers=None) -> None:
    """Fill every in-domain ghost cell of ``q`` (npatch, meqn, NY, NX) in place.

    ``positive`` lists components that must stay non-negative (depth, density): an
    interpolated ghost value of such a component is clipped at zero.  It may also be a
    boolean mask (meqn,) from :func:`positive_mask`.

    ``backend`` None or a CPU backend: Numba loops parallel over the plan entries (host
    arrays).  A GPU backend: ``plan`` must hold backend arrays (:meth:`GhostPlan.to`)
    and ``q`` be a backend array; one CUDA kernel launch, one thread per entry;
    nothing crosses to the host (a ``positive`` tuple becomes a device mask uploaded
    once per backend).  ``timers``: optional :class:`~forestpy.timers.Timers` charged
    per kind on the CPU (``ghost_fill.copy``, ``.average``, ``.interpolate``).
    """
    meqn = q.shape[1]
    if backend is not None and backend.is_gpu:
        from forestpy.patches.launch import component_mask

        if not _is_mask(positive, meqn):
            positive = component_mask(backend, meqn, positive)
        _fill_ghosts_gpu(plan, q, positive, backend, timers)
        return
    run_fill(
        plan, timers,
        copy=lambda dst, src: _fill_copy(q, dst, src),
        average=lambda dst, src: _fill_average(q, dst, src),
        interpolate=lambda *entries: _fill_interpolate(
            q, *entries, positive if _is_mask(positive, meqn) else positive_mask(meqn, positive)),
    )


def run_fill(plan: GhostPlan, timers, copy, average, interpolate) -> None:
    """The three kinds of a ghost fill in their order (copy, average, interpolate), each
    only where ``plan`` has entries and charged to its timer: ``copy(dst, src)``,
    ``average(dst, src)``, ``interpolate(dst, center, nbr, valid, offset)`` with the
    plan's arrays.  Every CPU fill (plain and surface-preserving) runs its kernels
    through this; a GPU fill runs the three kinds in one launch."""
    if len(plan.copy_dst):
        with phase(timers, "ghost_fill.copy"):
            copy(plan.copy_dst, plan.copy_src)
    if len(plan.avg_dst):
        with phase(timers, "ghost_fill.average"):
            average(plan.avg_dst, plan.avg_src)
    if len(plan.interp_dst):
        with phase(timers, "ghost_fill.interpolate"):
            interpolate(plan.interp_dst, plan.interp_center, plan.interp_nbr,
                        plan.interp_valid, plan.interp_offset)


@numba.njit(inline="always")
def _plan_entry(q, copy_dst, copy_src, avg_dst, avg_src, interp_dst, center, nbr, valid,
                offset, positive, k):
    """Entry ``k`` of the whole plan: the copies first, then the averages, then the
    interpolations (each kind reads interior cells only, so one launch may run all
    three at once; every ghost cell is written by one entry)."""
    ncopy = copy_dst.shape[0]
    if k < ncopy:
        _copy_entry(q, copy_dst, copy_src, k)
        return
    k -= ncopy
    navg = avg_dst.shape[0]
    if k < navg:
        _average_entry(q, avg_dst, avg_src, k)
        return
    _interpolate_entry(q, interp_dst, center, nbr, valid, offset, positive, k - navg)


def plan_entries(plan: GhostPlan) -> int:
    """Entries of every kind of ``plan`` (threads of a fused ghost-fill launch)."""
    return len(plan.copy_dst) + len(plan.avg_dst) + len(plan.interp_dst)


def _fill_ghosts_gpu(plan, q, positive, backend, timers) -> None:
    """The three ghost-fill kinds over a plan of device arrays in one launch, one thread
    per entry (``positive``: the device mask of components clipped at zero); the same
    values as three launches of one kind each, as no entry reads a ghost cell."""
    from forestpy.patches.launch import launch

    launch(_plan_entry, plan_entries(plan), q, plan.copy_dst, plan.copy_src, plan.avg_dst,
           plan.avg_src, plan.interp_dst, plan.interp_center, plan.interp_nbr,
           plan.interp_valid, plan.interp_offset, positive, backend=backend)


@numba.njit(inline="always")
def _ghost_frame_entry(src, dst, mbc, k):
    """Ghost cell ``k`` of the frame, patch- and component-major (per patch and
    component: the ``mbc`` bottom rows, the ``mbc`` top rows, then the left and right
    ``mbc`` columns of each interior row), copied from ``src`` to ``dst``."""
    ny, nx = src.shape[2], src.shape[3]
    band = mbc * nx
    frame = 2 * band + 2 * mbc * (ny - 2 * mbc)
    g = k % frame
    pm = k // frame
    if g < 2 * band:
        j = g // nx if g < band else ny - mbc + (g - band) // nx
        i = g % nx
    else:
        g -= 2 * band
        j = mbc + g // (2 * mbc)
        c = g % (2 * mbc)
        i = c if c < mbc else nx - 2 * mbc + c
    p = pm // src.shape[1]
    m = pm % src.shape[1]
    dst[p, m, j, i] = src[p, m, j, i]


def copy_ghost_frame(src, dst, mbc: int, backend=None) -> None:
    """Copy the ghost cells (only) of padded patch arrays ``src`` into ``dst`` (on a GPU
    ``backend``: one launch, a thread per ghost cell, instead of four strided copies)."""
    if backend is not None and backend.is_gpu:
        from forestpy.patches.launch import launch

        ny, nx = src.shape[2], src.shape[3]
        frame = 2 * mbc * nx + 2 * mbc * (ny - 2 * mbc)
        launch(_ghost_frame_entry, src.shape[0] * src.shape[1] * frame, src, dst, int(mbc),
               backend=backend)
        return
    dst[..., :mbc, :] = src[..., :mbc, :]
    dst[..., -mbc:, :] = src[..., -mbc:, :]
    dst[..., mbc:-mbc, :mbc] = src[..., mbc:-mbc, :mbc]
    dst[..., mbc:-mbc, -mbc:] = src[..., mbc:-mbc, -mbc:]
