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
is the Roe transverse splitting of :mod:`forestpy.extensions.riemann.shallow_roe`.

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

from forestpy.vtable import RiemannSolver

from ._common import fill_trivial_normal, sqrt_or_nan, velocity
from .shallow_roe import SHALLOW_WATER, roe_averages, roe_transverse_split

__all__ = ["rpn2_shallow_hlle", "rpt2_shallow_hlle", "shallow_hlle"]


def rpn2_shallow_hlle(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: HLLE, two waves around one middle state."""
    grav = params[0]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, 0.0, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    uhat, vhat, chat = roe_averages(ql, qr, grav, mu, mv)
    ul = velocity(hl, ql[mu])
    vl = velocity(hl, ql[mv])
    ur = velocity(hr, qr[mu])
    vr = velocity(hr, qr[mv])
    s1 = min(ul - sqrt_or_nan(grav * hl), uhat - chat)
    s2 = max(ur + sqrt_or_nan(grav * hr), uhat + chat)

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


def rpt2_shallow_hlle(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: the Roe transverse splitting shared with ``shallow_roe``."""
    roe_transverse_split(ixy, ql, qr, params[0], asdq, bmasdq, bpasdq)


shallow_hlle = RiemannSolver(
    name="shallow_hlle",
    num_waves=2,
    rpn2=rpn2_shallow_hlle,
    rpt2=rpt2_shallow_hlle,
    description="shallow water (h, hu, hv), HLLE solver with Einfeldt speeds",
    **SHALLOW_WATER,
)
