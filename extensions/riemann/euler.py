r"""Two-dimensional compressible Euler equations (ideal gas): Roe solver.

.. math::

    \begin{pmatrix} \rho \\ \rho u \\ \rho v \\ E \end{pmatrix}_t
    + \begin{pmatrix} \rho u \\ \rho u^2 + p \\ \rho u v \\ u (E + p) \end{pmatrix}_x
    + \begin{pmatrix} \rho v \\ \rho u v \\ \rho v^2 + p \\ v (E + p) \end{pmatrix}_y
    = 0, \qquad
    p = (\gamma - 1)\left(E - \tfrac12 \rho (u^2 + v^2)\right).

At an x-interface the Roe averages (weights :math:`\sqrt\rho`) of :math:`u`, :math:`v`
and the enthalpy :math:`H = (E + p)/\rho` give
:math:`\hat c^2 = (\gamma - 1)(\hat H - \tfrac12(\hat u^2 + \hat v^2))` and the
eigenvectors

.. math::

    r^1 = \begin{pmatrix} 1 \\ \hat u - \hat c \\ \hat v \\ \hat H - \hat u \hat c
    \end{pmatrix}, \quad
    r^2 = \begin{pmatrix} 1 \\ \hat u \\ \hat v \\ \tfrac12 (\hat u^2 + \hat v^2)
    \end{pmatrix}, \quad
    r^s = \begin{pmatrix} 0 \\ 0 \\ 1 \\ \hat v \end{pmatrix}, \quad
    r^3 = \begin{pmatrix} 1 \\ \hat u + \hat c \\ \hat v \\ \hat H + \hat u \hat c
    \end{pmatrix}

with the strengths (Toro 2009, Sec. 11.3.3)

.. math::

    \alpha^s = \Delta(\rho v) - \hat v \Delta\rho, \qquad
    \alpha^2 = \frac{\gamma - 1}{\hat c^2}\left[(\hat H - \hat u^2)\Delta\rho
        + \hat u \Delta(\rho u) - \Delta E + \hat v\, \alpha^s \right],

    \alpha^1 = \frac{(\hat u + \hat c)\Delta\rho - \Delta(\rho u) - \hat c \alpha^2}
        {2 \hat c}, \qquad
    \alpha^3 = \Delta\rho - \alpha^1 - \alpha^2.

Three waves are returned: the acoustic waves :math:`\alpha^1 r^1` (speed
:math:`\hat u - \hat c`) and :math:`\alpha^3 r^3` (speed :math:`\hat u + \hat c`), and
the middle wave :math:`\alpha^2 r^2 + \alpha^s r^s` (speed :math:`\hat u`) that
carries the density (entropy) and transverse-momentum (shear) jumps.  The Roe
property makes :math:`\sum_p s^p\mathcal{W}^p = f(q_r) - f(q_l)`.  The Harten-Hyman
entropy fix splits a transonic 1- or 3-rarefaction at its sonic point.  The
transverse solver decomposes :math:`\mathcal{A}^*\Delta q` in the same way in the
transverse direction, with the Roe averages of the interface states.

Non-physical states (``rho <= 0`` or ``p < 0``) give NaN outputs, never an exception.

References
----------
E. F. Toro, *Riemann Solvers and Numerical Methods for Fluid Dynamics*, 3rd ed.,
Springer, 2009, Chapters 3 and 11 (Roe solver for the Euler equations) and 11.4
(Harten-Hyman entropy fix).
R. J. LeVeque, *Finite Volume Methods for Hyperbolic Problems*, Cambridge University
Press, 2002, Sections 14.3, 15.3 and 18.8.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from forestpy.vtable import RiemannSolver

from ._common import fill_nan_normal, fill_nan_transverse, harten_hyman_left, sqrt_or_nan

__all__ = ["EULER_DERIVED_FIELDS", "euler", "roe_averages", "rpn2_euler", "rpt2_euler"]


@numba.njit
def _pressure(q, gamma):
    """Pressure of a state; NaN when ``rho <= 0`` (no exception)."""
    rho = q[0]
    if not (rho > 0.0):
        return math.nan
    return (gamma - 1.0) * (q[3] - 0.5 * (q[1] * q[1] + q[2] * q[2]) / rho)


@numba.njit
def _sound_speed(rho, mom_n, mom_t, energy, gamma):
    """Sound speed of a state given by its components; NaN if not physical."""
    if not (rho > 0.0):
        return math.nan
    p = (gamma - 1.0) * (energy - 0.5 * (mom_n * mom_n + mom_t * mom_t) / rho)
    return sqrt_or_nan(gamma * p / rho)


@numba.njit
def roe_averages(ql, qr, gamma, mn, mt):
    """Roe averages ``(un, ut, H, c)``; ``mn``/``mt`` index the normal/other momentum.

    Returns NaNs when a state is not physical or the averaged sound speed is not
    positive.
    """
    pl = _pressure(ql, gamma)
    pr = _pressure(qr, gamma)
    if not (pl >= 0.0 and pr >= 0.0):
        return math.nan, math.nan, math.nan, math.nan
    rl = ql[0]
    rr = qr[0]
    sl = math.sqrt(rl)
    sr = math.sqrt(rr)
    den = sl + sr
    un = (ql[mn] / sl + qr[mn] / sr) / den
    ut = (ql[mt] / sl + qr[mt] / sr) / den
    h = ((ql[3] + pl) / sl + (qr[3] + pr) / sr) / den
    c2 = (gamma - 1.0) * (h - 0.5 * (un * un + ut * ut))
    if not (c2 > 0.0):
        return math.nan, math.nan, math.nan, math.nan
    return un, ut, h, math.sqrt(c2)


@numba.njit
def _strengths(d0, dn, dt, de, un, ut, h, c, gamma):
    """Coefficients ``(a1, a2, a_shear, a3)`` of a jump in the Roe eigenvectors."""
    a_s = dt - ut * d0
    a2 = (gamma - 1.0) / (c * c) * ((h - un * un) * d0 + un * dn - de + ut * a_s)
    a1 = ((un + c) * d0 - dn - c * a2) / (2.0 * c)
    a3 = d0 - a1 - a2
    return a1, a2, a_s, a3


def rpn2_euler(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: Roe, 3 waves (shear and entropy in the middle), Harten-Hyman fix."""
    gamma = params[0]
    mu = ixy
    mv = 3 - ixy
    u, v, h, c = roe_averages(ql, qr, gamma, mu, mv)
    if not (c > 0.0):
        fill_nan_normal(wave, s, amdq, apdq)
        return
    a1, a2, a_s, a3 = _strengths(
        qr[0] - ql[0], qr[mu] - ql[mu], qr[mv] - ql[mv], qr[3] - ql[3], u, v, h, c, gamma
    )

    wave[0, 0] = a1
    wave[mu, 0] = a1 * (u - c)
    wave[mv, 0] = a1 * v
    wave[3, 0] = a1 * (h - u * c)
    s[0] = u - c

    wave[0, 1] = a2
    wave[mu, 1] = a2 * u
    wave[mv, 1] = a2 * v + a_s
    wave[3, 1] = a2 * 0.5 * (u * u + v * v) + a_s * v
    s[1] = u

    wave[0, 2] = a3
    wave[mu, 2] = a3 * (u + c)
    wave[mv, 2] = a3 * v
    wave[3, 2] = a3 * (h + u * c)
    s[2] = u + c

    # 1-family: u - c in ql and in ql + W1
    rl = ql[0]
    lam_l = ql[mu] / rl - _sound_speed(rl, ql[mu], ql[mv], ql[3], gamma)
    r1 = rl + wave[0, 0]
    m1 = ql[mu] + wave[mu, 0]
    lam_r = math.nan
    if r1 > 0.0:
        lam_r = m1 / r1 - _sound_speed(r1, m1, ql[mv] + wave[mv, 0], ql[3] + wave[3, 0], gamma)
    k1 = harten_hyman_left(s[0], lam_l, lam_r)
    k2 = min(s[1], 0.0)
    # 3-family: u + c in qr - W3 and in qr
    rr = qr[0]
    lam_r = qr[mu] / rr + _sound_speed(rr, qr[mu], qr[mv], qr[3], gamma)
    r2 = rr - wave[0, 2]
    m2 = qr[mu] - wave[mu, 2]
    lam_l = math.nan
    if r2 > 0.0:
        lam_l = m2 / r2 + _sound_speed(r2, m2, qr[mv] - wave[mv, 2], qr[3] - wave[3, 2], gamma)
    k3 = harten_hyman_left(s[2], lam_l, lam_r)

    for m in range(4):
        amdq[m] = k1 * wave[m, 0] + k2 * wave[m, 1] + k3 * wave[m, 2]
        apdq[m] = (s[0] - k1) * wave[m, 0] + (s[1] - k2) * wave[m, 1] + (s[2] - k3) * wave[m, 2]


def rpt2_euler(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: Roe eigen-decomposition in the transverse direction."""
    gamma = params[0]
    mt = ixy  # momentum along the interface normal (tangential to the transverse dir.)
    mn = 3 - ixy  # momentum in the transverse direction
    un, ut, h, c = roe_averages(ql, qr, gamma, mn, mt)
    if not (c > 0.0):
        fill_nan_transverse(bmasdq, bpasdq)
        return
    b1, b2, b_s, b3 = _strengths(asdq[0], asdq[mn], asdq[mt], asdq[3], un, ut, h, c, gamma)
    s1 = un - c
    s3 = un + c
    for side in range(2):
        if side == 0:
            k1 = min(s1, 0.0) * b1
            k2 = min(un, 0.0) * b2
            ks = min(un, 0.0) * b_s
            k3 = min(s3, 0.0) * b3
        else:
            k1 = max(s1, 0.0) * b1
            k2 = max(un, 0.0) * b2
            ks = max(un, 0.0) * b_s
            k3 = max(s3, 0.0) * b3
        f0 = k1 + k2 + k3
        fn = k1 * s1 + k2 * un + k3 * s3
        ft = (k1 + k2 + k3) * ut + ks
        fe = k1 * (h - un * c) + k2 * 0.5 * (un * un + ut * ut) + ks * ut + k3 * (h + un * c)
        if side == 0:
            bmasdq[0] = f0
            bmasdq[mn] = fn
            bmasdq[mt] = ft
            bmasdq[3] = fe
        else:
            bpasdq[0] = f0
            bpasdq[mn] = fn
            bpasdq[mt] = ft
            bpasdq[3] = fe


def _euler_velocity(q, m):
    """``rho u`` / ``rho`` (``m == 1``) or ``rho v / rho`` (``m == 2``), 0 where ``rho <= 0``."""
    rho = q[:, 0]
    ok = rho > 0
    return np.where(ok, q[:, m] / np.where(ok, rho, 1), 0)


def _euler_pressure(q, aux, params):
    """``p = (gamma - 1) (E - (rhou^2 + rhov^2) / (2 rho))`` (``gamma = params[0]``)."""
    rho = q[:, 0]
    ok = rho > 0
    kinetic = np.where(ok, 0.5 * (q[:, 1] ** 2 + q[:, 2] ** 2) / np.where(ok, rho, 1), 0)
    return (params[0] - 1.0) * (q[:, 3] - kinetic)


#: Output quantities of the Euler solver (see ``RiemannSolver.derived_fields``).
EULER_DERIVED_FIELDS = {
    "velocity_x": lambda q, aux, params: _euler_velocity(q, 1),
    "velocity_y": lambda q, aux, params: _euler_velocity(q, 2),
    "pressure": _euler_pressure,
}

euler = RiemannSolver(
    name="euler",
    num_eqn=4,
    num_waves=3,
    rpn2=rpn2_euler,
    rpt2=rpt2_euler,
    num_aux=0,
    field_names=("rho", "rhou", "rhov", "E"),
    param_names=("gamma",),
    default_params={"gamma": 1.4},
    fwave=False,
    wall_reflect=((1,), (2,)),
    positive=(0, 3),
    description=(
        "2D compressible Euler, ideal gas (rho, rhou, rhov, E), Roe solver with entropy fix"
    ),
    derived_fields=EULER_DERIVED_FIELDS,
)
