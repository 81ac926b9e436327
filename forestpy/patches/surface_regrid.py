"""Regrid transfer of a depth over a bottom (``RiemannSolver.surface_interp``).

The regrid of :mod:`forestpy.patches.regrid` transfers conserved densities.  For a
depth ``h = q[i]`` over a bottom ``aux[j]`` that alone would break a lake at rest at
shorelines; :func:`surface_fields` adds, before the transfer, the surface quantities
of the old patches, and :func:`surface_regrid` rebuilds, after it, the depth and the
momenta of the new patches from them (the companion of the ghost fill of
:mod:`forestpy.patches.surface_ghosts`).  Both are batched over all patches.
:class:`ShorelineRegrid` is the pair as the regrid uses it, made from the Riemann
solver's record and parameters (the simulation only calls it).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ShorelineRegrid", "surface_dry_tolerance", "surface_fields", "surface_regrid"]


def surface_dry_tolerance(riemann, params) -> float:
    """The depth at or below which a cell is dry for the surface rules of ``riemann``
    (the parameter named by ``RiemannSolver.surface_dry`` in the solver's parameter
    array ``params``; 0 when it names none)."""
    name = riemann.surface_dry
    if name is None:
        return 0.0
    return float(params[riemann.param_names.index(name)])


class ShorelineRegrid:
    """The regrid of a depth over a bottom (``RiemannSolver.surface_interp``): the
    surface fields that travel with the conserved densities (:meth:`with_surface`) and
    the new patches' depth and momenta rebuilt from them (:meth:`rebuild`)."""

    def __init__(self, riemann, params):
        self.depth, self.bottom = riemann.surface_interp
        self.mode = riemann.surface_regrid
        self.dry_tolerance = surface_dry_tolerance(riemann, params)

    @classmethod
    def of(cls, riemann, params) -> ShorelineRegrid | None:
        """The shoreline regrid of ``riemann`` (None: its regrid transfers densities
        only)."""
        return None if riemann.surface_interp is None else cls(riemann, params)

    def with_surface(self, density, aux, xp):
        """``density`` (old patches, ghosts filled) with the :func:`surface_fields`
        appended as extra components."""
        extra = surface_fields(density, aux, self.depth, self.bottom, self.dry_tolerance, xp)
        return xp.concatenate([density, extra], axis=1)

    def rebuild(self, q, meqn: int, aux, mbc: int, dlev, backend):
        """The new patches' ``meqn`` components from the transferred ``q`` (see
        :func:`surface_regrid`; ``dlev``: host, +1 refined, -1 coarsened, 0 copied)."""
        return surface_regrid(q, meqn, aux, self.depth, self.bottom, mbc,
                              self.dry_tolerance, self.mode, dlev, backend)


def surface_fields(q, aux, i: int, j: int, drytol: float, xp):
    """Per cell of the padded old patches, what a regrid of a depth ``q[i]`` over the
    bottom ``aux[j]`` needs (stacked as 5 extra components, transferred like ``q``):
    the surface ``w = h + b``, ``wet = (h > drytol)``, ``wet * w``, the rest surface
    ``eta_ref`` (``w`` where wet; else the mean wet surface of the face neighbours) and
    ``has_ref`` (1 where ``eta_ref`` is defined).  Averaged by a coarsening they give
    the wet fraction and the mean wet surface of a family; a refined family's mean of
    any of them is its parent's value (the transfer's children average back)."""
    h, b = q[:, i], aux[:, j]
    w = h + b
    wet = (h > drytol).astype(q.dtype)
    ww = wet * w
    total = xp.zeros_like(w)
    count = xp.zeros_like(w)
    for a, out in ((ww, total), (wet, count)):
        out[:, 1:-1, 1:-1] = (a[:, 1:-1, :-2] + a[:, 1:-1, 2:]) + (a[:, :-2, 1:-1] + a[:, 2:, 1:-1])
    nbr = count > 0
    eta_ref = xp.where(wet > 0, w, xp.where(nbr, total / xp.where(nbr, count, 1.0), w))
    has_ref = ((wet > 0) | nbr).astype(q.dtype)
    return xp.stack([w, wet, ww, eta_ref, has_ref], axis=1)


def _families(a, my: int, mx: int):
    """View ``(..., my, mx)`` as 2x2 families ``(..., my/2, 2, mx/2, 2)``."""
    return a.reshape(a.shape[:-2] + (my // 2, 2, mx // 2, 2))


def _family_sum(a):
    """Sum over each 2x2 family of ``_families(a)``, kept as ``(..., Y, 1, X, 1)``, in
    one fixed order (rows first), so that NumPy and CuPy, whose multi-axis reductions
    add in different orders, round alike."""
    return ((a[..., 0:1, :, 0:1] + a[..., 0:1, :, 1:2])
            + (a[..., 1:2, :, 0:1] + a[..., 1:2, :, 1:2]))


def _rest_surface_for_volume(bottom, volume, xp):
    """Per family (``bottom`` of shape ``(n, Y, 2, X, 2)``, ``volume`` ``(n, Y, X)`` in
    child-cell units): the surface ``eta*`` with ``sum_c max(0, eta* - b_c) = volume``.
    The left side is piecewise linear and increasing in ``eta*``; with the bottoms
    sorted, ``b_1 <= ... <= b_4``, its value at ``b_k`` is ``k b_k - S_k`` (``S_k`` the
    partial sums), so ``eta* = (volume + S_m) / m`` with ``m`` the number of ``b_k``
    where that value is below ``volume``.  ``-inf`` where ``volume <= 0``."""
    n, Y, _, X, _ = bottom.shape
    b = xp.sort(bottom.transpose(0, 1, 3, 2, 4).reshape(n, Y, X, 4), axis=-1)
    # the partial sums one after the other (a GPU scan may add them in another order)
    s2 = b[..., 0] + b[..., 1]
    s3 = s2 + b[..., 2]
    partial = xp.stack([b[..., 0], s2, s3, s3 + b[..., 3]], axis=-1)
    k = xp.arange(1, 5, dtype=b.dtype)
    below = (k * b - partial) < volume[..., None]
    m = xp.maximum(below.sum(axis=-1), 1)
    s_m = xp.take_along_axis(partial, (m - 1)[..., None], axis=-1)[..., 0]
    return xp.where(volume > 0, (volume + s_m) / m, -xp.inf)


def surface_regrid(q, meqn: int, aux, i: int, j: int, mbc: int, drytol: float,
                    mode: str, dlev, backend):
    """After the transfer of ``[q, _surface_fields]`` onto the new patches: the new
    ``q`` (``meqn`` components) of a depth ``q[i]`` over the bottom ``aux[j]``.

    ``dlev`` (host, per new patch): +1 refined, -1 coarsened, 0 unchanged (copied
    exactly).  Refined 2x2 families at a shore (some child dry in the family's rest
    state, the parent dry, or a negative depth from the linear transfer of the surface)
    get the rest state of a surface (``mode`` "conserve": ``eta*`` holding the parent's
    volume, exactly; "rest": the parent's rest surface ``eta_ref``), momenta at the
    parent's velocity; the other refined families the linear transfer of the surface
    (in "conserve" shifted by a constant depth to the parent's volume, so the volume is
    exact even where a coarse bottom is not the mean of its children's).  Coarsened
    cells keep the average depth, except in "rest" mode where a partly wet family gets
    ``min(mean h, max(0, eta_wet - b))`` and proportionally scaled momenta.  Momenta
    are zero where the depth is zero.
    """
    xp = backend.xp
    out = q[:, :meqn]
    ext = q[:, meqn:]
    b0 = mbc
    _, _, ny, nx = q.shape
    my, mx = ny - 2 * b0, nx - 2 * b0
    inner = (slice(b0, -b0), slice(b0, -b0))
    others = [m for m in range(meqn) if m != i]
    conserve = mode == "conserve"

    kids = np.flatnonzero(dlev == 1)
    if len(kids):
        kd = backend.to_device(kids)
        fam_q = _families(out[kd][(slice(None), slice(None)) + inner], my, mx)
        fam_e = _families(ext[kd][(slice(None), slice(None)) + inner], my, mx)
        bottom = _families(aux[kd][(slice(None), j) + inner], my, mx)

        def parent(a):
            return _family_sum(a) * 0.25

        h_par = parent(fam_q[:, i])
        h_lin = fam_e[:, 0] - bottom
        if conserve:
            h_lin = h_lin + (h_par - parent(h_lin))
        eta_star = _rest_surface_for_volume(bottom, 4.0 * h_par[:, :, 0, :, 0], xp)
        eta_star = eta_star[:, :, None, :, None]
        if conserve:
            target = eta_star
        else:
            has_ref = parent(fam_e[:, 4]) > 0.5
            target = xp.where(has_ref, parent(fam_e[:, 3]), eta_star)
        top = bottom.max(axis=(-3, -1), keepdims=True)
        shore = (
            (h_lin.min(axis=(-3, -1), keepdims=True) < 0.0)
            | (target - top <= drytol)
            | (h_par <= drytol)
        )
        h_rest = xp.maximum(target - bottom, 0.0)
        if conserve:  # exact volume: the rounding of eta* removed by a rescale
            vol = _family_sum(h_rest)
            h_rest = h_rest * xp.where(vol > 0, 4.0 * h_par / xp.where(vol > 0, vol, 1.0), 0.0)
            per_depth = xp.where(h_par > 0, 1.0 / xp.where(h_par > 0, h_par, 1.0), 0.0)
        else:
            per_depth = xp.where(h_par > drytol, 1.0 / xp.where(h_par > drytol, h_par, 1.0),
                                 0.0)
        new = fam_q.copy()
        new[:, i] = xp.where(shore, h_rest, h_lin)
        for m in others:
            new[:, m] = xp.where(shore, parent(fam_q[:, m]) * per_depth * h_rest, fam_q[:, m])
        out[(kd, slice(None)) + inner] = new.reshape(new.shape[:2] + (my, mx))

    coarse = np.flatnonzero(dlev == -1)
    if len(coarse) and not conserve:
        cd = backend.to_device(coarse)
        qc = out[cd][(slice(None), slice(None)) + inner]
        ec = ext[cd][(slice(None), slice(None)) + inner]
        h_mean = qc[:, i]
        wet = ec[:, 1]
        partly = (wet > 0) & (wet < 1)
        eta_wet = ec[:, 2] / xp.where(wet > 0, wet, 1.0)
        h_rest = xp.minimum(h_mean, xp.maximum(eta_wet - aux[cd][(slice(None), j) + inner], 0.0))
        h_new = xp.where(partly, h_rest, h_mean)
        scale = xp.where(h_mean > 0, h_new / xp.where(h_mean > 0, h_mean, 1.0), 0.0)
        qc[:, i] = h_new
        for m in others:
            qc[:, m] = qc[:, m] * scale
        out[(cd, slice(None)) + inner] = qc

    h = out[(slice(None), i) + inner]
    dry = h == 0.0
    for m in others:
        out[(slice(None), m) + inner][dry] = 0.0
    return xp.ascontiguousarray(out)
