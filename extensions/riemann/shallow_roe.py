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
    transverse_split,
    velocity,
)

__all__ = [
    "SHALLOW_DERIVED_FIELDS",
    "SHALLOW_WATER",
    "roe_averages",
    "roe_transverse_split",
    "rpn2_shallow_roe",
    "rpt2_shallow_roe",
    "shallow_roe",
]


@numba.njit
def roe_state(ql, qr, grav, mn, mt):
    """Roe averages ``(un, ut, c)``, ``sqrt(h)`` of both states and its inverse
    (zero for a dry state): ``(un, ut, c, sl, sr, 1/sl, 1/sr)``.

    Both depths must be ``>= 0`` (checked by the callers); dry states get zero
    velocity.  Uses ``sqrt(h) u = hu / sqrt(h)``, so only three divisions are needed.
    """
    hl = ql[0]
    hr = qr[0]
    sl = math.sqrt(hl)
    sr = math.sqrt(hr)
    isl = 1.0 / sl if hl > 0.0 else 0.0
    isr = 1.0 / sr if hr > 0.0 else 0.0
    den = sl + sr
    iden = 1.0 / den if den > 0.0 else 0.0
    un = (ql[mn] * isl + qr[mn] * isr) * iden
    ut = (ql[mt] * isl + qr[mt] * isr) * iden
    c = math.sqrt(0.5 * grav * (hl + hr))
    return un, ut, c, sl, sr, isl, isr


@numba.njit
def roe_averages(ql, qr, grav, mn, mt):
    """Roe averages ``(un, ut, c)`` of two shallow-water states.

    ``mn`` is the index of the momentum normal to the splitting direction and ``mt``
    the other one.  Both depths must be ``>= 0``; two dry states give zeros.
    """
    un, ut, c, _, _, _, _ = roe_state(ql, qr, grav, mn, mt)
    return un, ut, c


@numba.njit
def roe_transverse_split(ixy, ql, qr, grav, asdq, bmasdq, bpasdq):
    """Split ``asdq`` into the transverse Roe eigenvectors (shared by Roe and HLLE).

    For ``ixy == 1`` the transverse direction is y: the speeds are ``v - c, u, v + c``
    with the Roe averages ``u, v, c`` of ``ql`` and ``qr``.
    """
    if not (ql[0] >= 0.0 and qr[0] >= 0.0):
        fill_nan_transverse(bmasdq, bpasdq)
        return
    mt = ixy  # momentum along the interface normal: tangential to the transverse dir.
    mn = 3 - ixy  # momentum in the transverse direction
    un, ut, c, _, _, _, _ = roe_state(ql, qr, grav, mn, mt)
    if c == 0.0:
        for m in range(3):
            bmasdq[m] = 0.0
            bpasdq[m] = 0.0
        return
    bmasdq[0], bmasdq[mn], bmasdq[mt], bpasdq[0], bpasdq[mn], bpasdq[mt] = transverse_split(
        un, ut, c, asdq, mn, mt)


def rpn2_shallow_roe(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: Roe linearisation, 3 waves, Harten-Hyman entropy fix."""
    grav = params[0]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, 0.0, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    u, v, c, sl, sr, isl, isr = roe_state(ql, qr, grav, mu, mv)

    dh = hr - hl
    dhu = qr[mu] - ql[mu]
    dhv = qr[mv] - ql[mv]
    half_ic = 0.5 / c
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
    # wave: evaluate the outer state first (sqrt(g h) = sqrt(g) sqrt(h) is free) and
    # the state inside the fan only when the outer speed allows a sign change.
    sqrt_g = math.sqrt(grav)
    # 1-family: speed u - sqrt(g h) left of the wave (ql) and right of it (ql + W1)
    k1 = min(s[0], 0.0)
    lam_l = ql[mu] * isl * isl - sqrt_g * sl  # u - sqrt(g h) of ql (0 velocity if dry)
    if lam_l < 0.0:
        h1 = hl + wave[0, 0]
        lam_r = velocity(h1, ql[mu] + wave[mu, 0]) - sqrt_or_nan(grav * h1)
        k1 = harten_hyman_left(s[0], lam_l, lam_r)
    # 2-family: linearly degenerate
    k2 = min(s[1], 0.0)
    # 3-family: u + sqrt(g h) left of the wave (qr - W3) and right of it (qr)
    k3 = min(s[2], 0.0)
    lam_r = qr[mu] * isr * isr + sqrt_g * sr
    if lam_r > 0.0:
        h2 = hr - wave[0, 2]
        lam_l = velocity(h2, qr[mu] - wave[mu, 2]) + sqrt_or_nan(grav * h2)
        k3 = harten_hyman_left(s[2], lam_l, lam_r)

    for m in range(3):
        amdq[m] = k1 * wave[m, 0] + k2 * wave[m, 1] + k3 * wave[m, 2]
        apdq[m] = (s[0] - k1) * wave[m, 0] + (s[1] - k2) * wave[m, 1] + (s[2] - k3) * wave[m, 2]


def rpt2_shallow_roe(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: Roe eigen-decomposition in the transverse direction."""
    roe_transverse_split(ixy, ql, qr, params[0], asdq, bmasdq, bpasdq)


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
    description="shallow water (h, hu, hv), Roe solver with Harten-Hyman entropy fix",
    **SHALLOW_WATER,
)
