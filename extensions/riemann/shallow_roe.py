r"""Shallow water equations: Roe solver with the Harten-Hyman entropy fix.

.. math::

    h_t + (hu)_x + (hv)_y = 0,

    (hu)_t + \left(hu^2 + \tfrac12 g h^2\right)_x + (huv)_y = 0,

    (hv)_t + (huv)_x + \left(hv^2 + \tfrac12 g h^2\right)_y = 0.

At an x-interface the Roe averages

.. math::

    \hat u = \frac{\sqrt{h_l}\,u_l + \sqrt{h_r}\,u_r}{\sqrt{h_l} + \sqrt{h_r}}, \qquad
    \hat v = \frac{\sqrt{h_l}\,v_l + \sqrt{h_r}\,v_r}{\sqrt{h_l} + \sqrt{h_r}}, \qquad
    \hat c = \sqrt{g\,\frac{h_l + h_r}{2}}

give the speeds :math:`\hat u - \hat c, \hat u, \hat u + \hat c`, the eigenvectors
:math:`r^1 = (1, \hat u - \hat c, \hat v)`, :math:`r^2 = (0, 0, 1)`,
:math:`r^3 = (1, \hat u + \hat c, \hat v)` and the wave strengths

.. math::

    \alpha^1 = \frac{(\hat u + \hat c)\Delta h - \Delta(hu)}{2\hat c}, \qquad
    \alpha^2 = \Delta(hv) - \hat v \Delta h, \qquad
    \alpha^3 = \frac{\Delta(hu) - (\hat u - \hat c)\Delta h}{2\hat c}.

The Roe property makes :math:`\sum_p s^p \mathcal{W}^p = f(q_r) - f(q_l)`.  In a
transonic rarefaction of the 1- or 3-family (the characteristic speed
:math:`\lambda` changes sign from negative to positive across the wave) the
Harten-Hyman fix splits that wave's fluctuation at the sonic point:
:math:`\mathcal{A}^-` gets :math:`\lambda_l (\lambda_r - s)/(\lambda_r - \lambda_l)\,
\mathcal{W}` and :math:`\mathcal{A}^+` the rest of :math:`s\,\mathcal{W}`.

The transverse solver decomposes :math:`\mathcal{A}^*\Delta q` in the eigenvectors of
the Roe matrix in the transverse direction, with the Roe averages of the two states
of the interface.

The solve is given in the pieces of the work-sharing contract
(:mod:`forestpy.vtable`): the cell state :math:`(\sqrt h, 1/\sqrt h, hu/\sqrt h,
hv/\sqrt h, \sqrt g \sqrt h)`, the interface state :math:`(\hat u, \hat v, \hat c,
1/(2\hat c))` that the normal solve and both transverse splittings share, and the two
solves; ``rpn2_shallow_roe`` and ``rpt2_shallow_roe`` are their compositions.

Negative depths are not an error inside the solver: every output is set to NaN
and the time stepper's NaN check reports it.  A dry state (``h == 0``) has zero
velocity.

References
----------
R. J. LeVeque, *Finite Volume Methods for Hyperbolic Problems*, Cambridge University
Press, 2002, Sections 13.1, 15.3 (Roe solver for shallow water), 15.3.5 (Harten-Hyman
entropy fix) and 21.
A. Harten and J. M. Hyman, Self adjusting grid methods for one-dimensional hyperbolic
conservation laws, *J. Comput. Phys.* 50 (1983) 235-269.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from forestpy.vtable import RiemannSolver

from ._common import (
    fill_nan_transverse,
    fill_trivial_normal,
    harten_hyman_left,
    sqrt_or_nan,
    transverse_split_h,
    velocity,
)

__all__ = [
    "SHALLOW_DERIVED_FIELDS",
    "SHALLOW_WATER",
    "cell_state_shallow_roe",
    "edge_state_shallow_roe",
    "roe_transverse_split",
    "rpn2_shallow_roe",
    "rpn2e_shallow_roe",
    "rpt2_shallow_roe",
    "rpt2e_shallow_roe",
    "shallow_roe",
]

#: Entries of the Roe solver's cell state (see :func:`cell_state_shallow_roe`).
ROE_CELL_STATE = 5
#: Entries of the Roe interface state (see :func:`edge_state_shallow_roe`).
ROE_EDGE_STATE = 4


@numba.njit
def cell_state_shallow_roe(q, aux, params):
    """Per-cell part of the Roe averages and of the entropy fix:
    ``(sqrt(h), 1/sqrt(h), hu/sqrt(h), hv/sqrt(h), sqrt(g) sqrt(h))``, where
    ``1/sqrt(h)`` is 0 for a dry cell (so a dry cell has zero velocity) and the
    momenta over ``sqrt(h)`` are formed as ``hu * (1/sqrt(h))``.  A negative depth
    gives NaN (the normal solve reports it)."""
    h = q[0]
    sq = sqrt_or_nan(h)
    isq = 1.0 / sq if h > 0.0 else 0.0
    return sq, isq, q[1] * isq, q[2] * isq, math.sqrt(params[0]) * sq


@numba.njit
def edge_state_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params):
    """Roe averages of one interface from the cell states of its two sides:
    ``(u, v, c, 0.5 / c)``, ``u`` the velocity along the interface normal (x for
    ``ixy == 1``) and ``v`` the other one; two dry states give zeros (and ``0.5/c``
    infinite).  The normal solve and both transverse splittings share them."""
    mu = ixy
    mv = 3 - ixy
    den = csl[0] + csr[0]
    iden = 1.0 / den if den > 0.0 else 0.0
    u = (csl[1 + mu] + csr[1 + mu]) * iden
    v = (csl[1 + mv] + csr[1 + mv]) * iden
    c = sqrt_or_nan(0.5 * params[0] * (ql[0] + qr[0]))
    half_ic = 0.5 / c if c != 0.0 else math.inf
    return u, v, c, half_ic


@numba.njit
def roe_transverse_split(ixy, ql, qr, es, asdq, bmasdq, bpasdq):
    """Split ``asdq`` into the transverse Roe eigenvectors (shared by Roe and HLLE),
    at the interface state ``es`` of :func:`edge_state_shallow_roe`.

    For ``ixy == 1`` the transverse direction is y: the speeds are ``v - c, u, v + c``
    with the Roe averages ``u, v, c`` of ``ql`` and ``qr``.
    """
    if not (ql[0] >= 0.0 and qr[0] >= 0.0):
        fill_nan_transverse(bmasdq, bpasdq)
        return
    mt = ixy  # momentum along the interface normal: tangential to the transverse dir.
    mn = 3 - ixy  # momentum in the transverse direction
    c = es[2]
    if c == 0.0:
        for m in range(3):
            bmasdq[m] = 0.0
            bpasdq[m] = 0.0
        return
    bmasdq[0], bmasdq[mn], bmasdq[mt], bpasdq[0], bpasdq[mn], bpasdq[mt] = transverse_split_h(
        es[1], es[0], c, es[3], asdq, mn, mt)


@numba.njit
def rpn2e_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq):
    """Normal solve given the cell states and the interface state: Roe linearisation,
    3 waves, Harten-Hyman entropy fix."""
    grav = params[0]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, 0.0, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    u = es[0]
    v = es[1]
    c = es[2]
    half_ic = es[3]

    dh = hr - hl
    dhu = qr[mu] - ql[mu]
    dhv = qr[mv] - ql[mv]
    a1 = ((u + c) * dh - dhu) * half_ic
    a2 = dhv - v * dh
    a3 = (dhu - (u - c) * dh) * half_ic

    wave[0, 0] = a1
    wave[mu, 0] = a1 * (u - c)
    wave[mv, 0] = a1 * v
    s[0] = u - c

    wave[0, 1] = 0.0
    wave[mu, 1] = 0.0
    wave[mv, 1] = a2
    s[1] = u

    wave[0, 2] = a3
    wave[mu, 2] = a3 * (u + c)
    wave[mv, 2] = a3 * v
    s[2] = u + c

    # Harten-Hyman acts only where the characteristic speed changes sign across a
    # wave: evaluate the outer state first (u = (hu / sqrt(h)) / sqrt(h) and
    # sqrt(g h) = sqrt(g) sqrt(h) come from the cell state) and the state inside the
    # fan only when the outer speed allows a sign change.  The inner speed can change
    # the result only when the inner state moves the right way (u - sqrt(g h) > 0 needs
    # h > 0 and hu > 0; u + sqrt(g h) < 0 needs h > 0 and hu < 0): the division and
    # the square root are skipped otherwise, where they would give min(s, 0) again.
    # 1-family: speed u - sqrt(g h) left of the wave (ql) and right of it (ql + W1)
    k1 = min(s[0], 0.0)
    lam_l = csl[1 + mu] * csl[1] - csl[4]  # u - sqrt(g h) of ql (0 velocity if dry)
    if lam_l < 0.0:
        h1 = hl + wave[0, 0]
        hu1 = ql[mu] + wave[mu, 0]
        if h1 > 0.0 and hu1 > 0.0:
            lam_r = velocity(h1, hu1) - sqrt_or_nan(grav * h1)
            k1 = harten_hyman_left(s[0], lam_l, lam_r)
    # 2-family: linearly degenerate
    k2 = min(s[1], 0.0)
    # 3-family: u + sqrt(g h) left of the wave (qr - W3) and right of it (qr)
    k3 = min(s[2], 0.0)
    lam_r = csr[1 + mu] * csr[1] + csr[4]
    if lam_r > 0.0:
        h2 = hr - wave[0, 2]
        hu2 = qr[mu] - wave[mu, 2]
        if h2 > 0.0 and hu2 < 0.0:
            lam_l = velocity(h2, hu2) + sqrt_or_nan(grav * h2)
            k3 = harten_hyman_left(s[2], lam_l, lam_r)

    for m in range(3):
        amdq[m] = k1 * wave[m, 0] + k2 * wave[m, 1] + k3 * wave[m, 2]
        apdq[m] = (s[0] - k1) * wave[m, 0] + (s[1] - k2) * wave[m, 1] + (s[2] - k3) * wave[m, 2]


@numba.njit
def rpt2e_shallow_roe(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq,
                      bmasdq, bpasdq):
    """Transverse solve given the interface state: the Roe eigen-decomposition in the
    transverse direction."""
    roe_transverse_split(ixy, ql, qr, es, asdq, bmasdq, bpasdq)


def rpn2_shallow_roe(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: Roe linearisation, 3 waves, Harten-Hyman entropy fix (composed of
    :func:`cell_state_shallow_roe`, :func:`edge_state_shallow_roe` and
    :func:`rpn2e_shallow_roe`)."""
    csl = cell_state_shallow_roe(ql, auxl, params)
    csr = cell_state_shallow_roe(qr, auxr, params)
    es = edge_state_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params)
    rpn2e_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq)


def rpt2_shallow_roe(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: Roe eigen-decomposition in the transverse direction (composed
    of the cell, interface and transverse pieces)."""
    csl = cell_state_shallow_roe(ql, aux2, params)
    csr = cell_state_shallow_roe(qr, aux2, params)
    es = edge_state_shallow_roe(ixy, ql, qr, csl, csr, aux2, aux2, params)
    rpt2e_shallow_roe(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq,
                      bmasdq, bpasdq)


def _shallow_velocity(q, m):
    """``hu / h`` (``m == 1``) or ``hv / h`` (``m == 2``), 0 where ``h <= 0`` (dry)."""
    h = q[:, 0]
    wet = h > 0
    return np.where(wet, q[:, m] / np.where(wet, h, 1), 0)


def _shallow_speed(q, aux, params):
    u = _shallow_velocity(q, 1)
    v = _shallow_velocity(q, 2)
    return np.sqrt(u * u + v * v)


#: Output quantities of both shallow-water solvers (see ``RiemannSolver.derived_fields``);
#: ``surface`` is the depth as long as the bottom is flat.
SHALLOW_DERIVED_FIELDS = {
    "depth": lambda q, aux, params: q[:, 0].copy(),
    "velocity_x": lambda q, aux, params: _shallow_velocity(q, 1),
    "velocity_y": lambda q, aux, params: _shallow_velocity(q, 2),
    "speed": _shallow_speed,
    "surface": lambda q, aux, params: q[:, 0].copy(),
}

#: The record entries every shallow-water solver on (h, hu, hv) without aux shares
#: (Roe, HLLE): fields, gravity, wall reflection, positivity of h, derived fields.
SHALLOW_WATER = {
    "num_eqn": 3,
    "num_aux": 0,
    "field_names": ("h", "hu", "hv"),
    "param_names": ("grav",),
    "default_params": {"grav": 1.0},
    "fwave": False,
    "wall_reflect": ((1,), (2,)),
    "positive": (0,),
    "derived_fields": SHALLOW_DERIVED_FIELDS,
}

shallow_roe = RiemannSolver(
    name="shallow_roe",
    num_waves=3,
    rpn2=rpn2_shallow_roe,
    rpt2=rpt2_shallow_roe,
    num_cell_state=ROE_CELL_STATE,
    cell_state=cell_state_shallow_roe,
    num_edge_state=ROE_EDGE_STATE,
    edge_state=edge_state_shallow_roe,
    rpn2e=rpn2e_shallow_roe,
    rpt2e=rpt2e_shallow_roe,
    description="shallow water (h, hu, hv), Roe solver with Harten-Hyman entropy fix",
    **SHALLOW_WATER,
)
