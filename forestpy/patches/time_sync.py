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

import numpy as np

__all__ = ["TimeSyncPlan", "build_time_sync_plan", "apply_time_sync"]

# per face of the coarse patch: (edge side of the coarse patch, edge side of the fine
# patch, ixy, sign): sign +1 when the fine patch lies on the + side.
_FACES = {0: (0, 1, 1, -1), 1: (1, 0, 1, +1), 2: (2, 3, 2, -1), 3: (3, 2, 2, +1)}


@dataclass
class TimeSyncPlan:
    """One entry per (coarse edge cell, fine edge cell) pair; pairs of a coarse cell
    are adjacent (2 per coarse cell).  Triplets are ``(p, j, i)`` into padded arrays."""

    coarse: np.ndarray  # (n, 3)
    fine: np.ndarray  # (n, 3)
    coarse_edge: np.ndarray  # (n, 3): patch, side, k into edge fluxes
    fine_edge: np.ndarray  # (n, 3)
    ixy: np.ndarray  # (n,) 1 or 2
    sign: np.ndarray  # (n,) +1 fine on + side, -1 on - side

    def __len__(self):
        return len(self.ixy)


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


def build_time_sync_plan(forest, geom) -> TimeSyncPlan:
    """Pairs of coarse and fine edge cells along every coarse-fine face (vectorised)."""
    nb = forest.face_neighbors()
    parts = {k: [] for k in ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign")}
    for face, (cside, fside, ixy, sign) in _FACES.items():
        cp = np.flatnonzero(nb.kind[:, face] == 2)
        if len(cp) == 0:
            continue
        m = geom.my if face < 2 else geom.mx
        kc = np.arange(m)
        half = kc // (m // 2)  # which fine neighbour
        kf = 2 * (kc - half * (m // 2))  # first of the two fine edge cells
        P = np.repeat(cp, 2 * m)
        KC = np.tile(np.repeat(kc, 2), len(cp))
        KF = np.tile(np.stack([kf, kf + 1], 1).ravel(), len(cp))
        H = np.tile(np.repeat(half, 2), len(cp))
        F = nb.index[P, face, H]
        cj, ci = _edge_cell(cside, KC, geom)
        fj, fi = _edge_cell(fside, KF, geom)
        parts["coarse"].append(np.stack([P, cj, ci], 1))
        parts["fine"].append(np.stack([F, fj, fi], 1))
        parts["coarse_edge"].append(np.stack([P, np.full_like(P, cside), KC], 1))
        parts["fine_edge"].append(np.stack([F, np.full_like(F, fside), KF], 1))
        parts["ixy"].append(np.full(len(P), ixy, dtype=np.int64))
        parts["sign"].append(np.full(len(P), sign, dtype=np.int64))
    if not parts["ixy"]:
        z3 = np.zeros((0, 3), dtype=np.int64)
        z = np.zeros(0, dtype=np.int64)
        return TimeSyncPlan(z3, z3, z3, z3, z, z)
    return TimeSyncPlan(**{k: np.concatenate(v) for k, v in parts.items()})


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
) -> None:
    """Correct ``q_new`` in place along coarse-fine faces (see the module docstring).

    ``q_old`` is the state the step started from (the extra Riemann problems use it),
    ``edge`` the kernel's edge fluxes ``(npatch, 4, meqn, max(mx, my))`` and
    ``fluctuations(ixy, ql, qr, auxl, auxr, params, out)`` the batched ``amdq + apdq``.
    """
    if len(plan) == 0:
        return
    c, f = plan.coarse, plan.fine
    qc = q_old[c[:, 0], :, c[:, 1], c[:, 2]]
    qf = q_old[f[:, 0], :, f[:, 1], f[:, 2]]
    if aux is not None and aux.shape[1] > 0:
        ac = aux[c[:, 0], :, c[:, 1], c[:, 2]]
        af = aux[f[:, 0], :, f[:, 1], f[:, 2]]
    else:
        ac = af = np.zeros((len(plan), 0))
    plus = plan.sign > 0
    ql = np.where(plus[:, None], qc, qf)
    qr = np.where(plus[:, None], qf, qc)
    al = np.where(plus[:, None], ac, af) if ac.shape[1] else ac
    ar = np.where(plus[:, None], af, ac) if ac.shape[1] else af
    dflux = np.empty_like(ql)
    for ixy in (1, 2):
        sel = np.flatnonzero(plan.ixy == ixy)
        if len(sel):
            out = np.empty((len(sel), ql.shape[1]))
            fluctuations(
                ixy,
                np.ascontiguousarray(ql[sel]),
                np.ascontiguousarray(qr[sel]),
                np.ascontiguousarray(al[sel]),
                np.ascontiguousarray(ar[sel]),
                params,
                out,
            )
            dflux[sel] = out
    ce, fe = plan.coarse_edge, plan.fine_edge
    fine_flux = edge[fe[:, 0], fe[:, 1], :, fe[:, 2]]
    coarse_flux = edge[ce[:, 0], ce[:, 1], :, ce[:, 2]]
    sgn = plan.sign[:, None].astype(float)
    # + side:  -(mean(fp + df) - fm);  - side:  +(mean(fm - df) - fp)
    fine_term = (fine_flux + sgn * dflux).reshape(-1, 2, ql.shape[1]).mean(axis=1)
    coarse_cell = c[0::2]
    width = np.where(plan.ixy[0::2] == 1, geom.dx[coarse_cell[:, 0]], geom.dy[coarse_cell[:, 0]])
    ratio = dt / width
    if capacity_index >= 0:
        ratio = ratio / aux[coarse_cell[:, 0], capacity_index, coarse_cell[:, 1], coarse_cell[:, 2]]
    corr = -sgn[0::2] * ratio[:, None] * (fine_term - coarse_flux[0::2])
    np.add.at(q_new, (coarse_cell[:, 0], slice(None), coarse_cell[:, 1], coarse_cell[:, 2]), corr)
