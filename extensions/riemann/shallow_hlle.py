r"""Shallow water equations: HLLE solver with Einfeldt speeds.

.. math::

    h_t + (hu)_x + (hv)_y = 0,

    (hu)_t + \left(hu^2 + \tfrac12 g h^2\right)_x + (huv)_y = 0,

    (hv)_t + (huv)_x + \left(hv^2 + \tfrac12 g h^2\right)_y = 0.

The HLL approximation replaces the Riemann fan by a single middle state
:math:`q^*` between the speeds (Einfeldt 1988)

.. math::

    s^1 = \min(u_l - c_l,\ \hat u - \hat c), \qquad
    s^2 = \max(u_r + c_r,\ \hat u + \hat c),

with :math:`c = \sqrt{g h}` and the Roe averages :math:`\hat u` (weights
:math:`\sqrt h`) and :math:`\hat c = \sqrt{g (h_l + h_r)/2}`.  Conservation fixes the
middle state,

.. math::

    q^* = \frac{s^2 q_r - s^1 q_l - \left(f(q_r) - f(q_l)\right)}{s^2 - s^1},

and the two waves are :math:`\mathcal{W}^1 = q^* - q_l`,
:math:`\mathcal{W}^2 = q_r - q^*`, so that
:math:`s^1\mathcal{W}^1 + s^2\mathcal{W}^2 = f(q_r) - f(q_l)`.  The transverse solver
is the Roe transverse splitting of :mod:`forestpy.extensions.riemann.shallow_roe`; the
interface state (Roe averages, ``0.5/c``) is that solver's, computed once per interface
for the normal solve and both transverse splittings (the work-sharing contract of
:mod:`forestpy.vtable`).

Negative depths give NaN outputs (never an exception); dry states (``h == 0``) are
handled, the Einfeldt speeds keep the middle depth non-negative.

References
----------
E. F. Toro, *Riemann Solvers and Numerical Methods for Fluid Dynamics*, 3rd ed.,
Springer, 2009, Section 10.3 (HLL and the Einfeldt speed estimates).
B. Einfeldt, On Godunov-type methods for gas dynamics, *SIAM J. Numer. Anal.* 25
(1988) 294-318.
R. J. LeVeque, *Finite Volume Methods for Hyperbolic Problems*, Cambridge University
Press, 2002, Section 15.3.7.
"""

from __future__ import annotations

import numba

from forestpy.vtable import RiemannSolver

from ._common import fill_trivial_normal, sqrt_or_nan, velocity
from .shallow_roe import (
    ROE_EDGE_STATE,
    SHALLOW_WATER,
    edge_state_shallow_roe,
    roe_transverse_split,
)

__all__ = ["cell_state_shallow_hlle", "rpn2_shallow_hlle", "rpn2e_shallow_hlle",
           "rpt2_shallow_hlle", "rpt2e_shallow_hlle", "shallow_hlle"]


@numba.njit
def cell_state_shallow_hlle(q, aux, params):
    """``(sqrt(h), 1/sqrt(h), hu/sqrt(h), hv/sqrt(h), sqrt(g h), u, v)``: the first
    four as the Roe solver's (its interface state is shared), then the speed of
    gravity waves and the velocity (0 where dry, NaN for a negative depth)."""
    h = q[0]
    sq = sqrt_or_nan(h)
    isq = 1.0 / sq if h > 0.0 else 0.0
    return (sq, isq, q[1] * isq, q[2] * isq, sqrt_or_nan(params[0] * h),
            velocity(h, q[1]), velocity(h, q[2]))


@numba.njit
def rpn2e_shallow_hlle(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq,
                       apdq):
    """Normal solve given the cell and interface states: HLLE, two waves around one
    middle state."""
    grav = params[0]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, 0.0, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    uhat = es[0]
    chat = es[2]
    ul = csl[4 + mu]
    vl = csl[4 + mv]
    ur = csr[4 + mu]
    vr = csr[4 + mv]
    s1 = min(ul - csl[4], uhat - chat)
    s2 = max(ur + csr[4], uhat + chat)

    # jumps of q and of the normal flux f = (hu, hu^2 + g h^2 / 2, huv)
    dq0 = hr - hl
    dq1 = qr[mu] - ql[mu]
    dq2 = qr[mv] - ql[mv]
    df0 = dq1
    df1 = (qr[mu] * ur + 0.5 * grav * hr * hr) - (ql[mu] * ul + 0.5 * grav * hl * hl)
    df2 = qr[mu] * vr - ql[mu] * vl

    den = s2 - s1
    # W1 = q* - ql and W2 = qr - q*, written so that ql == qr gives exact zeros
    wave[0, 0] = (s2 * dq0 - df0) / den
    wave[mu, 0] = (s2 * dq1 - df1) / den
    wave[mv, 0] = (s2 * dq2 - df2) / den
    wave[0, 1] = (df0 - s1 * dq0) / den
    wave[mu, 1] = (df1 - s1 * dq1) / den
    wave[mv, 1] = (df2 - s1 * dq2) / den
    s[0] = s1
    s[1] = s2

    for m in range(3):
        amdq[m] = min(s1, 0.0) * wave[m, 0] + min(s2, 0.0) * wave[m, 1]
        apdq[m] = max(s1, 0.0) * wave[m, 0] + max(s2, 0.0) * wave[m, 1]


@numba.njit
def rpt2e_shallow_hlle(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq,
                       bmasdq, bpasdq):
    """Transverse solve given the interface state: the Roe transverse splitting shared
    with ``shallow_roe``."""
    roe_transverse_split(ixy, ql, qr, es, asdq, bmasdq, bpasdq)


def rpn2_shallow_hlle(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: HLLE, two waves around one middle state (composed of the pieces)."""
    csl = cell_state_shallow_hlle(ql, auxl, params)
    csr = cell_state_shallow_hlle(qr, auxr, params)
    es = edge_state_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params)
    rpn2e_shallow_hlle(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq)


def rpt2_shallow_hlle(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: the Roe transverse splitting shared with ``shallow_roe``
    (composed of the pieces)."""
    csl = cell_state_shallow_hlle(ql, aux2, params)
    csr = cell_state_shallow_hlle(qr, aux2, params)
    es = edge_state_shallow_roe(ixy, ql, qr, csl, csr, aux2, aux2, params)
    rpt2e_shallow_hlle(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq,
                       bmasdq, bpasdq)


shallow_hlle = RiemannSolver(
    name="shallow_hlle",
    num_waves=2,
    rpn2=rpn2_shallow_hlle,
    rpt2=rpt2_shallow_hlle,
    num_cell_state=7,
    cell_state=cell_state_shallow_hlle,
    num_edge_state=ROE_EDGE_STATE,
    edge_state=edge_state_shallow_roe,
    rpn2e=rpn2e_shallow_hlle,
    rpt2e=rpt2e_shallow_hlle,
    description="shallow water (h, hu, hv), HLLE solver with Einfeldt speeds",
    **SHALLOW_WATER,
)
