"""Ghost filling through a surface ``h + b`` that is aware of dry cells.

For Riemann solvers that declare ``surface_interp=(i, j)`` (a depth ``h = q[i]`` over a
bottom ``b = aux[j]``, see :class:`~forestpy.vtable.RiemannSolver`).  The ghost plan of
:mod:`forestpy.patches.ghost_plan` is executed entry kind by entry kind:

* **copy** entries copy every component, the depth included (exact copies: same-level
  faces see the neighbour's state bit for bit, thin films included);
* **average** and **interpolate** entries treat the components other than the depth as
  usual, and the depth through the *rest surface* ``W`` of their source cells:
  ``W = h + b`` in wet cells (``h > dry_tolerance``) and ``W = min(h + b, eta_ref)`` in
  dry cells (dry land takes the neighbouring surface, a film below it keeps its own),
  with ``eta_ref`` the mean surface of the wet cells of the same stencil (the 4 fine
  cells of an average; the coarse cell and its valid neighbours of an interpolation).
  The ghost depth is ``max(0, W_ghost - b_ghost)`` with ``b_ghost`` the ghost cell's
  own ``aux[j]``.  A stencil without wet cells averages/interpolates the
  depth itself (clipped at zero), so dry land gets no water from an interpolated bottom.

So a lake at rest meeting dry land inside a coarse or a fine ghost stencil gives the
rest state ``max(0, eta - b_ghost)`` in the ghost cell (the dry neighbours do not lift
or lower the surface), and no interior cell is touched.  The rule needs no sea level:
``eta_ref`` is local, so lakes above sea level work the same.

Execution as the plain ghost fill: per-entry ``numba.njit`` bodies written once, Numba
loops parallel over the entries on the CPU, and the same bodies compiled by
:func:`forestpy.cuda_device.cuda_device` in CUDA kernels (one thread per entry) on the
GPU backend.
"""

from __future__ import annotations

import numba

from forestpy.patches.ghost_plan import (
    _block_cell,
    _copy_entry,
    _fill_copy,
    _is_mask,
    _limited_slope,
    plan_entries,
    positive_mask,
    run_fill,
)

__all__ = ["fill_ghosts_surface"]


@numba.njit(inline="always")
def _value(q, aux, p, y, x, m, ib, drytol, eta_ref, rest):
    """Component ``m`` of cell ``(p, y, x)``; with ``rest`` (``m`` is then the depth)
    its rest surface: ``h + b`` where wet, ``min(h + b, eta_ref)`` where dry."""
    v = q[p, m, y, x]
    if not rest:
        return v
    w = v + aux[p, ib, y, x]
    if v > drytol:
        return w
    return min(w, eta_ref)


@numba.njit(inline="always")
def _mean4_value(q, aux, blk, m, ib, drytol, eta_ref, rest):
    """Mean over the 4 cells of the block ``blk`` (see ``GhostPlan``: an average's
    sources or an interpolation's neighbour), summed as ``_block_mean`` does.  One call
    site of ``_value`` (compile time)."""
    a = 0.0
    b = 0.0
    for c in range(4):
        p, y, x = _block_cell(blk, c)
        v = _value(q, aux, p, y, x, m, ib, drytol, eta_ref, rest)
        if c < 2:
            a += v
        else:
            b += v
    return 0.25 * (a + b)


@numba.njit(inline="always")
def _wet_surfaces(q, aux, blk, ih, ib, drytol):
    """(sum of the surfaces, number) of the wet cells among the 4 cells of ``blk``."""
    total = 0.0
    n = 0.0
    for c in range(4):
        p, y, x = _block_cell(blk, c)
        h = q[p, ih, y, x]
        if h > drytol:
            total += h + aux[p, ib, y, x]
            n += 1.0
    return total, n


@numba.njit(inline="always")
def _average_surface_entry(q, aux, dst, src, ih, ib, drytol, k):
    """Average entry ``k`` (``src``: the plan's ``avg_src`` blocks): plain means, the
    depth through the rest surface."""
    p, y, x = dst[k, 0], dst[k, 1], dst[k, 2]
    total, nwet = _wet_surfaces(q, aux, src[k], ih, ib, drytol)
    eta_ref = total / nwet if nwet > 0.0 else 0.0
    for m in range(q.shape[1]):
        rest = m == ih and nwet > 0.0
        v = _mean4_value(q, aux, src[k], m, ib, drytol, eta_ref, rest)
        if rest:
            v = max(0.0, v - aux[p, ib, y, x])
        elif m == ih:
            v = max(0.0, v)
        q[p, m, y, x] = v


@numba.njit(inline="always")
def _interpolate_surface_entry(q, aux, dst, center, nbr, valid, offset, positive, bounded,
                               ih, ib, drytol, k):
    """Interpolation entry ``k``: as the plain entry (limited-linear from the coarse
    cell and its neighbours), the depth through the rest surface."""
    c0, c1, c2 = center[k, 0], center[k, 1], center[k, 2]
    p, y, x = dst[k, 0], dst[k, 1], dst[k, 2]
    h = q[c0, ih, c1, c2]
    total = 0.0
    nwet = 0.0
    if h > drytol:
        total = h + aux[c0, ib, c1, c2]
        nwet = 1.0
    for d in range(4):
        if valid[k, d]:
            t, n = _wet_surfaces(q, aux, nbr[k, d], ih, ib, drytol)
            total += t
            nwet += n
    eta_ref = total / nwet if nwet > 0.0 else 0.0
    for m in range(q.shape[1]):
        rest = m == ih and nwet > 0.0
        vc = _value(q, aux, c0, c1, c2, m, ib, drytol, eta_ref, rest)
        xm = xp = ym = yp = 0.0
        for d in range(4):  # one call site (compile time)
            v = _mean4_value(q, aux, nbr[k, d], m, ib, drytol, eta_ref, rest)
            if d == 0:
                xm = v
            elif d == 1:
                xp = v
            elif d == 2:
                ym = v
            else:
                yp = v
        sx = _limited_slope(vc, xm, xp, valid[k, 0], valid[k, 1])
        sy = _limited_slope(vc, ym, yp, valid[k, 2], valid[k, 3])
        v = vc + offset[k, 0] * sx + offset[k, 1] * sy
        if rest:
            v = max(0.0, v - aux[p, ib, y, x])
        elif m == ih:  # dry land: the depth itself (films), never below zero
            v = max(0.0, v)
        elif positive[m] and v < 0.0 <= vc:
            v = 0.0
        q[p, m, y, x] = v
    _bound_ghost_velocity(q, dst, center, nbr, valid, bounded, ih, drytol, k)


@numba.njit(inline="always")
def _bound_ghost_velocity(q, dst, center, nbr, valid, bounded, ih, drytol, k):
    """The components ``bounded`` (a mask; by default all but the depth) are momenta
    of the depth ``q[ih]`` (``RiemannSolver.surface_velocity``): a ghost
    whose interpolated velocity falls outside the velocities of its wet sources (the
    coarse cell and the means of its neighbour blocks) gets the coarse cell's velocity
    (0 if that cell is dry), as GeoClaw's ``filval`` does for new fine cells.  Otherwise
    a thin ghost given the linear momentum of deep neighbours can reach tens of m/s and
    set the time step of its level."""
    c0, c1, c2 = center[k, 0], center[k, 1], center[k, 2]
    p, y, x = dst[k, 0], dst[k, 1], dst[k, 2]
    hg = q[p, ih, y, x]
    if hg <= drytol:
        return
    hc = q[c0, ih, c1, c2]
    for m in range(q.shape[1]):
        if m == ih or not bounded[m]:
            continue
        uc = q[c0, m, c1, c2] / hc if hc > drytol else 0.0
        lo = uc
        hi = uc
        for d in range(4):
            if valid[k, d]:
                hb = _mean4_value(q, q, nbr[k, d], ih, 0, drytol, 0.0, False)
                if hb > drytol:
                    ub = _mean4_value(q, q, nbr[k, d], m, 0, drytol, 0.0, False) / hb
                    lo = min(lo, ub)
                    hi = max(hi, ub)
        ug = q[p, m, y, x] / hg
        slack = 1e-12 * (abs(lo) + abs(hi))
        if ug < lo - slack or ug > hi + slack:
            q[p, m, y, x] = hg * uc


@numba.njit(parallel=True, cache=True)
def _fill_average_surface(q, aux, dst, src, ih, ib, drytol):
    for k in numba.prange(dst.shape[0]):
        _average_surface_entry(q, aux, dst, src, ih, ib, drytol, k)


@numba.njit(parallel=True, cache=True)
def _fill_interpolate_surface(q, aux, dst, center, nbr, valid, offset, positive, bounded,
                              ih, ib, drytol):
    for k in numba.prange(dst.shape[0]):
        _interpolate_surface_entry(q, aux, dst, center, nbr, valid, offset, positive,
                                   bounded, ih, ib, drytol, k)


@numba.njit(inline="always")
def _surface_plan_entry(q, aux, copy_dst, copy_src, avg_dst, avg_src, interp_dst, center,
                        nbr, valid, offset, positive, bounded, ih, ib, drytol, k):
    """Entry ``k`` of the whole plan, copies first, then averages, then interpolations
    (as ``ghost_plan._plan_entry``: every kind reads interior cells, and the ghost
    cell's own bottom, only)."""
    ncopy = copy_dst.shape[0]
    if k < ncopy:
        _copy_entry(q, copy_dst, copy_src, k)
        return
    k -= ncopy
    navg = avg_dst.shape[0]
    if k < navg:
        _average_surface_entry(q, aux, avg_dst, avg_src, ih, ib, drytol, k)
        return
    _interpolate_surface_entry(q, aux, interp_dst, center, nbr, valid, offset, positive,
                               bounded, ih, ib, drytol, k - navg)


def _fill_gpu(plan, q, aux, ih, ib, drytol, positive, bounded, backend) -> None:
    """The GPU twin of :func:`fill_ghosts_surface`'s loops: one launch, one thread per
    plan entry."""
    from forestpy.patches.launch import component_mask, launch

    if not _is_mask(positive, q.shape[1]):
        positive = component_mask(backend, q.shape[1], positive)
    bounded = component_mask(backend, q.shape[1], bounded)
    launch(_surface_plan_entry, plan_entries(plan), q, aux, plan.copy_dst, plan.copy_src,
           plan.avg_dst, plan.avg_src, plan.interp_dst, plan.interp_center, plan.interp_nbr,
           plan.interp_valid, plan.interp_offset, positive, bounded, ih, ib, drytol,
           backend=backend)


def fill_ghosts_surface(plan, q, aux, depth: int, bottom: int, dry_tolerance: float = 0.0,
                        positive=(), backend=None, timers=None, velocity=None) -> None:
    """Fill every in-domain ghost cell of ``q`` in place, the depth ``q[:, depth]``
    through the rest surface over ``aux[:, bottom]`` (see the module docstring).

    ``aux`` must hold the bottom in every ghost cell (``setaux`` evaluates it there;
    physical sides are the caller's business).  Interior cells are not modified.
    ``positive``: other components clipped at zero when interpolated (tuple or mask).
    ``velocity``: the components that are momenta of the depth, whose interpolated
    ghost velocity is bounded by the sources' (default: all but the depth; a
    two-layer solver names its lower layer's, ``RiemannSolver.surface_velocity``).
    ``backend``/``timers`` as in :func:`~forestpy.patches.ghost_plan.fill_ghosts`.
    """
    meqn = q.shape[1]
    if not (0 <= depth < meqn and 0 <= bottom < aux.shape[1]):
        raise ValueError(f"fill_ghosts_surface: depth index {depth} (num_eqn={meqn}) or "
                         f"bottom index {bottom} (num_aux={aux.shape[1]}) out of range")
    ih, ib, drytol = int(depth), int(bottom), float(dry_tolerance)
    bounded = (tuple(m for m in range(meqn) if m != ih) if velocity is None
               else tuple(int(m) for m in velocity))
    if backend is not None and backend.is_gpu:
        _fill_gpu(plan, q, aux, ih, ib, drytol, positive, bounded, backend)
        return
    run_fill(
        plan, timers,
        copy=lambda dst, src: _fill_copy(q, dst, src),
        average=lambda dst, src: _fill_average_surface(q, aux, dst, src, ih, ib, drytol),
        interpolate=lambda *entries: _fill_interpolate_surface(
            q, aux, *entries,
            positive if _is_mask(positive, meqn) else positive_mask(meqn, positive),
            positive_mask(meqn, bounded), ih, ib, drytol),
    )
