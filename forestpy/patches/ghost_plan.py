"""Ghost-fill plans: built once per regrid from the forest, executed every step.

Every ghost cell of every patch is classified by the leaf that covers it, found by a
vectorised point location on the forest (no Python loop over patches or faces):

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
run in CUDA kernels with one thread per entry (:mod:`forestpy.patches.cuda_kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from forestpy.forest import MAX_LEVEL
from forestpy.timers import phase

__all__ = ["GhostPlan", "build_ghost_plan", "fill_ghosts", "positive_mask"]


@dataclass
class GhostPlan:
    """Index lists of one ghost fill; ``(p, j, i)`` triplets into ``q[p, :, j, i]``.

    ``copy_dst``/``copy_src``: (n, 3). ``avg_dst``: (n, 3), ``avg_src``: (n, 4, 3).
    ``interp_dst``: (n, 3), ``interp_center``: (n, 3), ``interp_nbr``: (n, 4, 4, 3)
    for the x-, x+, y-, y+ neighbours (4 cells averaged each), ``interp_valid``:
    (n, 4) bool, ``interp_offset``: (n, 2) float offsets in coarse-cell units.
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


def build_ghost_plan(forest, geom) -> GhostPlan:
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


# --------------------------------------------------------------------------------------
# per-entry bodies: written once, called from the CPU prange loops below and, compiled by
# forestpy.cuda_device, from the CUDA kernels in forestpy.patches.cuda_kernels
# --------------------------------------------------------------------------------------


@numba.njit(inline="always")
def _mean4(q, m, s, k):
    """Mean of component ``m`` over the 4 cells ``s[k, 0..3]`` (triplets; s is (n, 4, 3))."""
    return 0.25 * (
        (q[s[k, 0, 0], m, s[k, 0, 1], s[k, 0, 2]] + q[s[k, 1, 0], m, s[k, 1, 1], s[k, 1, 2]])
        + (q[s[k, 2, 0], m, s[k, 2, 1], s[k, 2, 2]] + q[s[k, 3, 0], m, s[k, 3, 1], s[k, 3, 2]])
    )


@numba.njit(inline="always")
def _mean4_nbr(q, m, nbr, k, d):
    """Mean of component ``m`` over the 4 cells of neighbour ``d`` (nbr is (n, 4, 4, 3))."""
    return 0.25 * (
        (
            q[nbr[k, d, 0, 0], m, nbr[k, d, 0, 1], nbr[k, d, 0, 2]]
            + q[nbr[k, d, 1, 0], m, nbr[k, d, 1, 1], nbr[k, d, 1, 2]]
        )
        + (
            q[nbr[k, d, 2, 0], m, nbr[k, d, 2, 1], nbr[k, d, 2, 2]]
            + q[nbr[k, d, 3, 0], m, nbr[k, d, 3, 1], nbr[k, d, 3, 2]]
        )
    )


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
    """Average entry ``k``: the mean of the 2 x 2 fine cells ``src[k]`` (src is (n, 4, 3))."""
    for m in range(q.shape[1]):
        q[dst[k, 0], m, dst[k, 1], dst[k, 2]] = _mean4(q, m, src, k)


@numba.njit(inline="always")
def _interpolate_entry(q, dst, center, nbr, valid, offset, positive, k):
    """Interpolation entry ``k``: coarse value plus limited slopes times the offsets."""
    c0, c1, c2 = center[k, 0], center[k, 1], center[k, 2]
    for m in range(q.shape[1]):
        qc = q[c0, m, c1, c2]
        sx = _limited_slope(
            qc, _mean4_nbr(q, m, nbr, k, 0), _mean4_nbr(q, m, nbr, k, 1), valid[k, 0], valid[k, 1]
        )
        sy = _limited_slope(
            qc, _mean4_nbr(q, m, nbr, k, 2), _mean4_nbr(q, m, nbr, k, 3), valid[k, 2], valid[k, 3]
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
    and ``q`` be a backend array; up to three CUDA kernel launches, one thread per
    entry; nothing crosses to the host (a ``positive`` tuple becomes a device mask
    uploaded once per backend).  ``timers``: optional :class:`~forestpy.timers.Timers`
    charged per kind (``ghost_fill.copy``, ``.average``, ``.interpolate``).
    """
    meqn = q.shape[1]
    if backend is not None and backend.is_gpu:
        from forestpy.patches import cuda_kernels

        if not _is_mask(positive, meqn):
            positive = cuda_kernels.component_mask(backend, meqn, positive)
        cuda_kernels.fill_ghosts_gpu(plan, q, positive, backend, timers)
        return
    if len(plan.copy_dst):
        with phase(timers, "ghost_fill.copy"):
            _fill_copy(q, plan.copy_dst, plan.copy_src)
    if len(plan.avg_dst):
        with phase(timers, "ghost_fill.average"):
            _fill_average(q, plan.avg_dst, plan.avg_src)
    if len(plan.interp_dst):
        with phase(timers, "ghost_fill.interpolate"):
            _fill_interpolate(
                q,
                plan.interp_dst,
                plan.interp_center,
                plan.interp_nbr,
                plan.interp_valid,
                plan.interp_offset,
                positive if _is_mask(positive, meqn) else positive_mask(meqn, positive),
            )
