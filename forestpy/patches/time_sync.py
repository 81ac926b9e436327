"""Coarse-fine conservation fix ("time sync") for global time stepping.

The step kernel returns, for every patch side, the fluctuation fluxes it applied to
the edge cells (Clawpack's ``fp``/``fm``/``gp``/``gm``).  In flux form the update of a
cell is ``q -= dt/dx (Fhat_right - Fhat_left)`` with ``Fhat = f(q_left) + fm =
f(q_right) + fp``.  Along a coarse-fine face the coarse cell used its own ``Fhat``
while the two fine cells beside it used theirs; the fix replaces the coarse value by
the mean of the fine ones.  The unknown physical fluxes ``f(q)`` cancel except for
``f(q_fine) - f(q_coarse)``, which is the fluctuation sum ``amdq + apdq`` of one more
Riemann problem between the two cells (AMRClaw's "qad" idea):

.. math::

    \\Delta q_C = -\\frac{\\Delta t}{\\kappa_C \\Delta x_C}
      \\Big[\\tfrac12 \\sum_k (f^p_k + \\mathcal{A}\\Delta q(q_C, q_k)) - f^m_C\\Big]
    \\quad\\text{(fine patch on the +x side of the coarse cell)}

and the mirror formulas on the other sides.  Totals then change only through the
physical boundary, to round-off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from forestpy.patches.ghost_plan import _covering_leaf, _wrap_cell

__all__ = ["TimeSyncPlan", "build_time_sync_plan", "build_time_sync_plan_on", "apply_time_sync",
           "fine_face_terms", "coarse_face_fluxes", "correct_coarse", "corner_partners",
           "subset_plan"]

# per face of the coarse patch: (edge side of the coarse patch, edge side of the fine
# patch, ixy, sign): sign +1 when the fine patch lies on the + side.
_FACES = {0: (0, 1, 1, -1), 1: (1, 0, 1, +1), 2: (2, 3, 2, -1), 3: (3, 2, 2, +1)}


@dataclass
class TimeSyncPlan:
    """One entry per (coarse edge cell, fine edge cell) pair; pairs of a coarse cell
    are adjacent (2 per coarse cell).  Triplets are ``(p, j, i)`` into padded arrays.

    Entries are ordered by the coarse patch's face, 0, 1, 2, 3: the ``nx`` entries of
    x-normal faces (``ixy == 1``) come first, then those of y-normal faces, so that
    applying needs no data-dependent selection (which would cost a device-to-host
    transfer on the GPU).  ``width`` (one per coarse cell, i.e. per pair of entries) is
    the coarse cell's width across the face (dx for ``ixy == 1``, dy for ``ixy == 2``),
    so that applying needs no geometry.
    """

    coarse: np.ndarray  # (n, 3)
    fine: np.ndarray  # (n, 3)
    coarse_edge: np.ndarray  # (n, 3): patch, side, k into edge fluxes
    fine_edge: np.ndarray  # (n, 3)
    ixy: np.ndarray  # (n,) 1 or 2
    sign: np.ndarray  # (n,) +1 fine on + side, -1 on - side
    width: np.ndarray  # (n // 2,) dx or dy of the coarse cell across the face
    nx: int = 0  # number of entries with ixy == 1 (they come first)

    def __len__(self):
        return len(self.ixy)

    def to(self, backend) -> TimeSyncPlan:
        """This plan with every array a ``backend`` array (uploaded once per regrid)."""
        arrays = ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign", "width")
        return TimeSyncPlan(
            **{name: backend.to_device(getattr(self, name)) for name in arrays}, nx=self.nx
        )


def _edge_cell(side, k, geom):
    """Padded (j, i) of the edge cell number ``k`` along ``side`` of a patch."""
    mx, my, mbc = geom.mx, geom.my, geom.mbc
    if side == 0:
        return mbc + k, np.full_like(k, mbc)
    if side == 1:
        return mbc + k, np.full_like(k, mbc + mx - 1)
    if side == 2:
        return np.full_like(k, mbc), mbc + k
    return np.full_like(k, mbc + my - 1), mbc + k


def build_time_sync_plan(forest, geom, patches=None, backend=None) -> TimeSyncPlan:
    """Pairs of coarse and fine edge cells along every coarse-fine face.

    Built by :func:`build_time_sync_plan_on` (compiled bodies, one per patch face: on
    the device for a GPU ``backend``, no plan upload; a ``prange`` loop on the host
    otherwise).  ``patches`` (leaf indices; host arrays): only the entries whose coarse
    patch is one of them, in the whole plan's order (a rank of a distributed run builds
    the part it owns): a contiguous range by the faces of its patches alone, other sets
    as :func:`subset_plan` of the whole plan.  Entry for entry the
    vectorised build of ``tests/core/patches/time_sync_reference.py``."""
    if patches is None:
        return build_time_sync_plan_on(backend, forest, geom)
    patches = np.asarray(patches, dtype=np.int64)
    if len(patches) and (np.diff(patches) == 1).all():  # a range: its faces only
        return build_time_sync_plan_on(None, forest, geom, int(patches[0]),
                                       int(patches[-1]) + 1)
    whole = build_time_sync_plan_on(None, forest, geom)
    wanted = np.zeros(forest.n, dtype=bool)
    wanted[np.asarray(patches, dtype=np.int64)] = True
    return subset_plan(whole, wanted[whole.coarse[:, 0]])


def apply_time_sync(
    plan: TimeSyncPlan,
    q_old,
    q_new,
    aux,
    edge,
    geom,
    dt: float,
    fluctuations,
    params,
    capacity_index: int = -1,
    backend=None,
) -> None:
    """Correct ``q_new`` in place along coarse-fine faces (see the module docstring).

    ``q_old`` is the state the step started from (the extra Riemann problems use it),
    ``edge`` the kernel's edge fluxes ``(npatch, 4, meqn, max(mx, my))`` and
    ``fluctuations(ixy, ql, qr, auxl, auxr, params, out)`` the batched ``amdq + apdq``
    (called with C-contiguous arrays of the backend, once per direction that has
    entries).  ``geom`` is no longer used (the plan carries the cell widths) and may be
    None.  ``backend``: None (NumPy) or the backend whose ``xp`` the arrays and the
    plan's arrays (:meth:`TimeSyncPlan.to`) belong to; only ``xp`` operations and
    gathers with plan arrays, so on the GPU nothing crosses to the host.
    """
    if len(plan) == 0:
        return
    xp = np if backend is None else backend.xp
    fine_term = fine_face_terms(plan, q_old, q_old, aux, edge, fluctuations, params, xp)
    cc = plan.coarse[0::2]
    sgn = plan.sign[0::2, None].astype(np.float64)
    ratio = dt / plan.width
    if capacity_index >= 0:
        ratio = ratio / aux[cc[:, 0], capacity_index, cc[:, 1], cc[:, 2]]
    _add_to_coarse_cells(plan, q_new,
                         -sgn * ratio[:, None] * (fine_term - coarse_face_fluxes(plan, edge)))


def _add_to_coarse_cells(plan: TimeSyncPlan, q, corr) -> None:
    """``q`` at each coarse edge cell of ``plan`` += ``corr`` (one row per cell)."""
    cc = plan.coarse[0::2]
    # Scatter-add without np.add.at (CuPy has none): a fancy-index ``+=`` is exact only
    # if no cell repeats among its indices.  Within one direction none does: an x-normal
    # entry's coarse cell lies in the first interior column of its patch (face 0) or in
    # the last one (face 1), distinct columns as mx >= 2, and along one face each edge
    # cell k appears in one pair only; likewise for y.  A corner cell of a coarse patch
    # with fine neighbours across an x face and a y face is corrected once in each of
    # the two updates, x first, which is the order np.add.at used (entries x first).
    for sel in (slice(0, plan.nx // 2), slice(plan.nx // 2, len(plan) // 2)):
        if sel.stop > sel.start:
            cs = cc[sel]
            q[cs[:, 0], :, cs[:, 1], cs[:, 2]] += corr[sel]


def fine_face_terms(plan: TimeSyncPlan, q_coarse, q_fine, aux, edge, fluctuations, params,
                    xp=np):
    """Per coarse edge cell of ``plan`` (``len(plan) // 2`` rows): the mean over its two
    fine edge cells of the fine side's flux in the coarse cell's frame, ``fp + A dq``
    (fine on the + side) or ``fm - A dq`` (- side), where ``A dq`` is the fluctuation
    sum of the Riemann problem between the coarse cell's state in ``q_coarse`` and the
    fine cell's in ``q_fine`` (the states the two steps started from: the same array
    with one time step for all, the coarse step's start and the fine substep's start
    when the levels subcycle) and ``fp``/``fm`` the fine kernel's edge fluxes in
    ``edge``."""
    c, f = plan.coarse, plan.fine
    qc = q_coarse[c[:, 0], :, c[:, 1], c[:, 2]]
    qf = q_fine[f[:, 0], :, f[:, 1], f[:, 2]]
    if aux is not None and aux.shape[1] > 0:
        ac = aux[c[:, 0], :, c[:, 1], c[:, 2]]
        af = aux[f[:, 0], :, f[:, 1], f[:, 2]]
    else:
        ac = af = xp.zeros((len(plan), 0), dtype=qc.dtype)
    plus = (plan.sign > 0)[:, None]
    ql = xp.where(plus, qc, qf)
    qr = xp.where(plus, qf, qc)
    al = xp.where(plus, ac, af) if ac.shape[1] else ac
    ar = xp.where(plus, af, ac) if ac.shape[1] else af
    dflux = xp.empty_like(ql)
    # x-normal entries are the first plan.nx, y-normal ones the rest (see TimeSyncPlan)
    for ixy, sel in ((1, slice(0, plan.nx)), (2, slice(plan.nx, len(plan)))):
        if sel.stop > sel.start:
            fluctuations(
                ixy,
                xp.ascontiguousarray(ql[sel]),
                xp.ascontiguousarray(qr[sel]),
                xp.ascontiguousarray(al[sel]),
                xp.ascontiguousarray(ar[sel]),
                params,
                dflux[sel],  # rows of a C-contiguous array: contiguous
            )
    fe = plan.fine_edge
    fine_flux = edge[fe[:, 0], fe[:, 1], :, fe[:, 2]]
    sgn = plan.sign[:, None].astype(np.float64)
    # + side:  -(mean(fp + df) - fm);  - side:  +(mean(fm - df) - fp)
    fine = fine_flux + sgn * dflux
    return 0.5 * (fine[0::2] + fine[1::2])  # the mean of each pair, as np.mean


def coarse_face_fluxes(plan: TimeSyncPlan, edge):
    """The coarse kernel's edge flux (``fm``/``fp``) at each coarse edge cell of
    ``plan`` (``len(plan) // 2`` rows)."""
    ce = plan.coarse_edge[0::2]
    return edge[ce[:, 0], ce[:, 1], :, ce[:, 2]]


def correct_coarse(plan: TimeSyncPlan, q, aux, fine_sum, coarse_sum,
                   capacity_index: int = -1) -> None:
    """The time sync of a coarse step whose fine neighbours took several substeps:
    ``fine_sum`` is the sum over the fine substeps of ``dt_fine`` times
    :func:`fine_face_terms`, ``coarse_sum`` the coarse step's ``dt`` times
    :func:`coarse_face_fluxes`; ``q``'s coarse edge cells are corrected in place (the
    mirror of :func:`apply_time_sync` with the time step inside the sums)."""
    if len(plan) == 0:
        return
    cc = plan.coarse[0::2]
    sgn = plan.sign[0::2, None].astype(np.float64)
    ratio = 1.0 / plan.width
    if capacity_index >= 0:
        ratio = ratio / aux[cc[:, 0], capacity_index, cc[:, 1], cc[:, 2]]
    _add_to_coarse_cells(plan, q, -sgn * ratio[:, None] * (fine_sum - coarse_sum))


def subset_plan(plan: TimeSyncPlan, keep) -> TimeSyncPlan:
    """The entries of ``plan`` where the host bool array ``keep`` (one per entry, equal
    within each pair) is true, in the plan's order (x-normal entries still first)."""
    keep = np.asarray(keep, dtype=bool)
    arrays = ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign")
    return TimeSyncPlan(**{name: getattr(plan, name)[keep] for name in arrays},
                        width=plan.width[keep[0::2]],
                        nx=int(np.count_nonzero(plan.ixy[keep] == 1)))


# ------------------------------------------------------------------- the plan, per face
# One (face, patch) pair per CUDA thread (or prange iteration): whether the face is a
# coarse-fine one, found as the ghost plan finds covering leaves (a binary search on the
# sorted Morton keys), then its entries written at their place in the plan's order
# (faces 0..3, coarse patches in order, edge cells, the two fine cells of each).


@numba.njit(inline="always")
def _fine_across(keys, g, lvl, gqx, gqy, npatch, p0, fine, idx):
    """``fine[idx]``: the two leaves one level finer across face ``idx // npatch`` of
    patch ``p0 + idx % npatch`` (the half at lower edge cells first), -1 where the face
    is not a coarse-fine one."""
    face, p = idx // npatch, p0 + idx % npatch
    mx, my = g[4], g[5]
    level = lvl[p]
    m = my if face < 2 else mx
    fine[idx, 0] = -1
    fine[idx, 1] = -1
    for h in range(2):
        k = h * (m // 2)
        if face == 0:
            Ix, Iy = gqx[p] * mx - 1, gqy[p] * my + k
        elif face == 1:
            Ix, Iy = gqx[p] * mx + mx, gqy[p] * my + k
        elif face == 2:
            Ix, Iy = gqx[p] * mx + k, gqy[p] * my - 1
        else:
            Ix, Iy = gqx[p] * mx + k, gqy[p] * my + my
        Ix, Iy, inside = _wrap_cell(Ix, Iy, level, g)
        if not inside:
            return
        leaf = _covering_leaf(keys, g, level, Ix, Iy)
        if lvl[leaf] != level + 1:
            fine[idx, 0] = -1
            return
        fine[idx, h] = leaf
    if fine[idx, 1] < 0:
        fine[idx, 0] = -1


@numba.njit(inline="always")
def _edge_cell_at(side, k, mx, my, mbc):
    """Padded (j, i) of the edge cell number ``k`` along ``side`` (as _edge_cell)."""
    if side == 0:
        return mbc + k, mbc
    if side == 1:
        return mbc + k, mbc + mx - 1
    if side == 2:
        return mbc, mbc + k
    return mbc + my - 1, mbc + k


@numba.njit(inline="always")
def _face_entries(g, mbc, npatch, p0, fine, first, dx, dy, coarse, fine_cell, coarse_edge,
                  fine_edge, ixy, sign, width, idx):
    """The entries of the coarse-fine face ``idx`` (see _fine_across) from ``first[idx]``."""
    if fine[idx, 0] < 0:
        return
    face, p = idx // npatch, p0 + idx % npatch
    mx, my = g[4], g[5]
    m = my if face < 2 else mx
    cside = face
    fside = face + 1 if face % 2 == 0 else face - 1
    direction = 1 if face < 2 else 2
    plus = 1 if face % 2 == 1 else -1
    e0 = first[idx]
    for t in range(2 * m):
        e = e0 + t
        kc = t // 2
        half = kc // (m // 2)
        kf = 2 * (kc - half * (m // 2)) + t % 2
        f = fine[idx, half]
        cj, ci = _edge_cell_at(cside, kc, mx, my, mbc)
        fj, fi = _edge_cell_at(fside, kf, mx, my, mbc)
        coarse[e, 0], coarse[e, 1], coarse[e, 2] = p, cj, ci
        fine_cell[e, 0], fine_cell[e, 1], fine_cell[e, 2] = f, fj, fi
        coarse_edge[e, 0], coarse_edge[e, 1], coarse_edge[e, 2] = p, cside, kc
        fine_edge[e, 0], fine_edge[e, 1], fine_edge[e, 2] = f, fside, kf
        ixy[e] = direction
        sign[e] = plus
        if t % 2 == 0:
            width[e // 2] = dx[p] if direction == 1 else dy[p]


@numba.njit(parallel=True, cache=True)
def _fine_across_all(keys, g, lvl, gqx, gqy, npatch, p0, fine):
    for idx in numba.prange(fine.shape[0]):
        _fine_across(keys, g, lvl, gqx, gqy, npatch, p0, fine, idx)


@numba.njit(parallel=True, cache=True)
def _face_entries_all(g, mbc, npatch, p0, fine, first, dx, dy, coarse, fine_cell,
                      coarse_edge, fine_edge, ixy, sign, width):
    for idx in numba.prange(fine.shape[0]):
        _face_entries(g, mbc, npatch, p0, fine, first, dx, dy, coarse, fine_cell, coarse_edge,
                      fine_edge, ixy, sign, width, idx)


def build_time_sync_plan_on(backend, forest, geom, lo: int = 0,
                            hi: int | None = None) -> TimeSyncPlan:
    """:func:`build_time_sync_plan` of the patches ``lo:hi`` (default all: a
    distributed rank's owned range otherwise) made where ``backend`` computes (on
    a GPU the leaves' keys, levels, quadrant coordinates and cell sizes uploaded, a few
    numbers per leaf; None or a CPU backend: host arrays): one thread (``prange``
    iteration) per (face, patch) finds the coarse-fine faces, a prefix sum places their
    entries, a second pass writes them.  One small record (the entry counts) crosses to
    the host."""
    from forestpy.patches.tagging import per_patch

    if backend is None or not backend.is_gpu:
        xp, up, to_host, backend = np, np.ascontiguousarray, np.asarray, None
    else:
        xp, up, to_host = backend.xp, backend.to_device, backend.to_host
    mx, my, mbc = geom.mx, geom.my, geom.mbc
    hi = geom.npatch if hi is None else int(hi)
    lo = int(lo)
    npatch = hi - lo  # the faces of these patches only
    g = up(np.array([geom.trees_x, geom.trees_y, int(geom.periodic_x), int(geom.periodic_y),
                     mx, my], dtype=np.int64))
    keys, lvl, gqx, gqy = (up(np.ascontiguousarray(a, dtype=np.int64))
                           for a in (forest.keys, geom.level, geom.gqx, geom.gqy))
    fine = xp.empty((4 * npatch, 2), dtype=np.int64)
    per_patch(_fine_across, _fine_across_all, 4 * npatch, keys, g, lvl, gqx, gqy, npatch,
              lo, fine, backend=backend)
    per_face = up(np.repeat(np.array([2 * my, 2 * my, 2 * mx, 2 * mx], dtype=np.int64),
                            npatch))
    counts = xp.where(fine[:, 0] >= 0, per_face, 0)
    first = xp.zeros_like(counts)
    if len(counts) > 1:
        first[1:] = xp.cumsum(counts[:-1])
    n, nx = (int(v) for v in to_host(xp.stack([counts.sum(), counts[: 2 * npatch].sum()])))
    coarse, fine_cell, coarse_edge, fine_edge = (xp.empty((n, 3), dtype=np.int64)
                                                 for _ in range(4))
    ixy, sign = xp.empty(n, dtype=np.int64), xp.empty(n, dtype=np.int64)
    width = xp.empty(n // 2, dtype=np.float64)
    per_patch(_face_entries, _face_entries_all, 4 * npatch, g, mbc, npatch, lo, fine, first,
              up(geom.dx), up(geom.dy), coarse, fine_cell, coarse_edge, fine_edge, ixy, sign,
              width, backend=backend)
    return TimeSyncPlan(coarse=coarse, fine=fine_cell, coarse_edge=coarse_edge,
                        fine_edge=fine_edge, ixy=ixy, sign=sign, width=width, nx=nx)

def corner_partners(plan: TimeSyncPlan, xp=np):
    """``(partner, shared)`` for applying ``plan``'s corrections in one pass: for each
    y-normal pair (coarse cell) the index of the x-normal pair with the same coarse
    cell, or -1; for each x-normal pair whether a y-normal pair has its coarse cell.
    A corner cell of a coarse patch with fine neighbours across an x face and a y
    face is then corrected by the thread of its y pair, x correction first (the order
    of :func:`_add_to_coarse_cells`), and skipped by the x pair's.  Arrays of ``xp``
    (made with its operations: on the device for a device plan), cached on the plan
    (one per regrid)."""
    got = plan.__dict__.get("_corner_partners")
    if got is not None:
        return got
    cc = plan.coarse[0::2].astype(np.int64)
    # a coarse cell as one integer (patch, padded row and column: each < 2**16)
    key = (cc[:, 0] << 32) | (cc[:, 1] << 16) | cc[:, 2]
    nx = plan.nx // 2
    kx, ky = key[:nx], key[nx:]
    shared = xp.zeros(nx, dtype=np.bool_)
    if nx and len(ky):
        order = xp.argsort(kx)
        pos = xp.minimum(xp.searchsorted(kx[order], ky), nx - 1)
        hit = kx[order][pos] == ky
        partner = xp.where(hit, order[pos], -1).astype(np.int64)
        shared[partner[hit]] = True
    else:
        partner = xp.full(len(ky), -1, dtype=np.int64)
    got = plan.__dict__["_corner_partners"] = (partner, shared)
    return got
