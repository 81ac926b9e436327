r"""Shallow water over topography: George's augmented Riemann solver (GeoClaw's default).

.. math::

    h_t + (hu)_x + (hv)_y = 0,

    (hu)_t + \left(hu^2 + \tfrac12 g h^2\right)_x + (huv)_y = -g h\, b_x,

    (hv)_t + (huv)_x + \left(hv^2 + \tfrac12 g h^2\right)_y = -g h\, b_y,

with the bottom elevation :math:`b` in ``aux[0]`` and the surface :math:`\eta = h + b`.

Normal solve (``rpn2``).  At an interface the augmented system
:math:`w = (h, hu, \phi = hu^2 + \tfrac12 g h^2, b)` is split into three f-waves with
speeds :math:`\lambda^1 \le \lambda^2 \le \lambda^3` and a stationary wave that carries
the jump of the bottom (George 2008).  The stationary wave's jumps of depth and of the
momentum flux, :math:`\delta h` and :math:`\delta\phi`, are those of a steady state
across the step :math:`\Delta b`,

.. math::

    \delta h = \frac{g \bar h}{\bar s_1 \bar s_2}\,\Delta b, \qquad
    \delta\phi = -g \bar h\,\frac{\tilde s_1 \tilde s_2}{\bar s_1 \bar s_2}\,\Delta b,
    \qquad \bar s_1 \bar s_2 = \tfrac14 (u_l + u_r)^2 - g \bar h,
    \quad \tilde s_1 \tilde s_2 = \max(0, u_l u_r) - g \bar h,

(:math:`\delta h = -\Delta b`, :math:`\delta\phi = -g \bar h \Delta b` near critical
flow), bounded so that the middle states stay non-negative.  What is left,
:math:`(\Delta h - \delta h, \Delta(hu), \Delta\phi - \delta\phi)`, is decomposed on
the eigenvectors :math:`(1, \lambda^1, (\lambda^1)^2)`, :math:`(0, 0, 1)`,
:math:`(1, \lambda^3, (\lambda^3)^2)` with Einfeldt's speeds widened by the speeds of
the exact solution's structure (one Newton or secant step on the middle depth), and
:math:`\lambda^2 = (\lambda^1 + \lambda^3)/2`.  The f-waves are the mass and
momentum-flux rows, so the bottom source term lives *inside* the waves: the limited
second-order corrections act on it, and the scheme is second order over smoothly
varying bottoms (the hydrostatic reconstruction of :mod:`.hydrostatic` is first order
there).  The tangential momentum rides on the 1- and 3-waves with the velocities of
their sides; the rest of its flux jump goes to the wave on the downstream side of the
interface's mass flux.

Exact lake at rest: the jumps are written as the surface jump :math:`\Delta\eta` plus
terms proportional to the velocities, so two cells at rest with the same surface
(wet, or wet beside dry ground) give waves that are exactly zero.

Wet/dry (GeoClaw's rules): a cell with :math:`h \le` ``dry_tolerance`` is dry (zero
depth, velocity and momentum flux in the solve; its film counts as part of the ground,
so a lake beside a filmed bank stays exactly at rest).  Beside a dry cell whose bottom is
above the wet cell's surface the solver first asks whether the wet side's water would
climb it (the middle depth of the problem against its mirror image): if not, the dry
cell is a wall (the problem is solved against the mirror state and only the wave into
the wet cell is kept: no mass crosses); if it would, the dry cell's bottom is lowered
to the wet surface for the solve.

Transverse solve (``rpt2``): the eigen-decomposition of the transverse flux Jacobian at
the state of the cell that received the fluctuation (GeoClaw 5.8 and later); the part
moving towards a transverse neighbour whose bottom is above that cell's surface is
dropped (a wall).

Parameters: ``grav``, ``dry_tolerance`` (depth at or below which a cell is dry),
``sea_level`` (used by the refinement flags, initial conditions and output, not by the
Riemann solver).  Negative depths give NaN outputs, which the time stepper reports.

References
----------
D. L. George, Augmented Riemann solvers for the shallow water equations over variable
topography with steady states and inundation, *J. Comput. Phys.* 227 (2008) 3089-3113.
M. J. Berger, D. L. George, R. J. LeVeque and K. T. Mandli, The GeoClaw software for
depth-averaged flows with adaptive refinement, *Adv. Water Resour.* 34 (2011) 1195-1206.
D. S. Bale, R. J. LeVeque, S. Mitran and J. A. Rossmanith, A wave propagation method for
conservation laws and balance laws with spatially varying flux functions, *SIAM J. Sci.
Comput.* 24 (2003) 955-978.
R. J. LeVeque, *Finite Volume Methods for Hyperbolic Problems*, Cambridge University
Press, 2002, section 13.

Examples
--------
>>> import numpy as np
>>> from forestpy.extensions.geoclaw.riemann import geoclaw, rpn2_geoclaw
>>> params = geoclaw.params_array()
>>> ql, qr = np.array([2.0, 0.0, 0.0]), np.array([0.5, 0.0, 0.0])  # lake at rest:
>>> auxl, auxr = np.array([-2.0]), np.array([-0.5])                 # eta = 0 on both sides
>>> wave, s = np.zeros((3, 3)), np.zeros(3)
>>> amdq, apdq = np.zeros(3), np.zeros(3)
>>> rpn2_geoclaw(1, ql, qr, auxl, auxr, params, wave, s, amdq, apdq)
>>> bool(np.all(amdq == 0.0) and np.all(apdq == 0.0))
True
"""

from __future__ import annotations

import math

import numba
import numpy as np
from forestpy.extensions.riemann._common import (
    fill_nan_transverse,
    fill_trivial_normal,
    fill_zero_normal,
    sqrt_or_nan,
    transverse_split,
)

from forestpy.vtable import RiemannSolver, register_riemann

__all__ = [
    "GEOCLAW_DERIVED_FIELDS",
    "augmented_fwaves",
    "cell_state_geoclaw",
    "geoclaw",
    "riemann_structure",
    "rpn2_geoclaw",
    "rpn2e_geoclaw",
    "rpt2_geoclaw",
    "rpt2e_geoclaw",
    "split_fwaves",
]

#: Speeds this close to zero count as zero when the f-waves are split into the left-
#: and right-going fluctuations (half to each side).
_ZERO_SPEED = 1e-14


@numba.njit
def riemann_structure(hl, hr, ul, ur, cl, cr, drytol, grav):
    """Middle depth ``hm`` and the speeds ``(s1m, s2m)`` of the exact Riemann solution's
    1- and 2-families next to the middle state (LeVeque 2002, section 13).

    The middle depth comes from one step of an iteration on the wave-curve function:
    Newton on ``sqrt(h)`` from ``max(hl, hr)`` for two shocks, a secant step from
    ``min(hl, hr)`` for a shock and a rarefaction, closed form for two rarefactions.
    A dry side gives ``hm = 0`` and the dry-front speed for both speeds.  ``cl, cr``
    are ``sqrt(g h)`` of the two sides (the caller has them).
    """
    hmin = min(hl, hr)
    hmax = max(hl, hr)
    du = ur - ul
    if hmin <= drytol:
        sfront = ur + ul - 2.0 * cr + 2.0 * cl
        return 0.0, sfront, sfront
    cmin = min(cl, cr)
    cmax = max(cl, cr)
    f_min = du + 2.0 * (cmin - cmax)
    f_max = du + (hmax - hmin) * math.sqrt(0.5 * grav * (hmax + hmin) / (hmax * hmin))
    if f_min > 0.0:
        # two rarefactions: the middle depth in closed form
        t = max(0.0, -du + 2.0 * (cl + cr))
        hm = t * t / (16.0 * grav)
        cm = math.sqrt(grav * hm)
        return hm, ul + 2.0 * cl - 3.0 * cm, ur - 2.0 * cr + 3.0 * cm
    if f_max <= 0.0:
        # two shocks: one Newton step on sqrt(h) from the larger depth
        h0 = hmax
        gl = math.sqrt(0.5 * grav * (1.0 / h0 + 1.0 / hl))
        gr = math.sqrt(0.5 * grav * (1.0 / h0 + 1.0 / hr))
        # sums grouped so that the mirror image of a problem rounds the same way
        f0 = du + ((h0 - hl) * gl + (h0 - hr) * gr)
        dfdh = ((gl - grav * (h0 - hl) / (4.0 * h0 * h0 * gl))
                + (gr - grav * (h0 - hr) / (4.0 * h0 * h0 * gr)))
        root = math.sqrt(h0) - f0 / (2.0 * math.sqrt(h0) * dfdh)
        hm = root * root
        u1m = ul - (hm - hl) * math.sqrt(0.5 * grav * (1.0 / hm + 1.0 / hl))
        u2m = ur + (hm - hr) * math.sqrt(0.5 * grav * (1.0 / hm + 1.0 / hr))
        cm = math.sqrt(grav * hm)
        return hm, u1m - cm, u2m + cm
    # a shock and a rarefaction: one secant step from the smaller depth
    hm = hmin - f_min * (hmax - hmin) / (f_max - f_min)
    cm = math.sqrt(grav * hm)
    if hl > hr:
        return hm, ul + 2.0 * cl - 3.0 * cm, ul + 2.0 * cl - cm
    return hm, ur - 2.0 * cr + cm, ur - 2.0 * cr + 3.0 * cm


@numba.njit
def augmented_fwaves(hl, hr, hul, hur, ul, ur, vl, vr, bl, br, cl, cr, se1, se2, drytol,
                     grav, mu, mv, wave, s):
    """George's augmented decomposition (one pass, GeoClaw's ``maxiter = 1``).

    Inputs are the (dry-corrected) states of both sides, their bottoms, ``sqrt(g h)``
    of both sides and the Einfeldt speeds ``se1 <= se2``; writes the f-waves
    ``wave[m, p]`` (``m``: 0 mass, ``mu`` normal momentum, ``mv`` tangential momentum)
    and their speeds ``s[p]``.
    """
    hm, s1m, s2m = riemann_structure(hl, hr, ul, ur, cl, cr, drytol, grav)
    lam1 = min(se1, s2m)
    lam3 = max(se2, s1m)
    lam2 = 0.5 * (lam1 + lam3)
    width = lam3 - lam1
    iwidth = 1.0 / width
    hstar_hll = max(((hul - hur) + (lam3 * hr - lam1 * hl)) * iwidth, 0.0)

    crit = max(drytol * grav, 1e-6)
    hbar = 0.5 * (hl + hr)
    ghbar = grav * hbar
    usum2 = 0.25 * (ul + ur) * (ul + ur)
    s1s2bar = usum2 - ghbar
    s1s2tilde = max(0.0, ul * ur) - ghbar
    db = br - bl
    sonic = (abs(s1s2bar) <= crit
             or s1s2bar * s1s2tilde <= crit * crit
             or s1s2bar * lam1 * lam3 <= crit * crit)
    if not sonic:
        crit_sqrt = math.sqrt(crit)
        sonic = (min(abs(lam1), abs(lam3)) < crit_sqrt
                 or (lam1 < crit_sqrt and s1m > -crit_sqrt)
                 or (lam3 > -crit_sqrt and s2m < crit_sqrt)
                 or (ul + cl) * (ur + cr) < 0.0
                 or (ul - cl) * (ur - cr) < 0.0)

    dh = hr - hl
    deta = (hr + br) - (hl + bl)
    # the steady wave's depth jump: -db (+ a part that vanishes with the velocities)
    if sonic:
        excess_h = 0.0
        excess_phi = 0.0
    else:
        ibar = 1.0 / s1s2bar
        excess_h = db * usum2 * ibar
        excess_phi = -db * ghbar * (s1s2tilde - s1s2bar) * ibar
    ddh = excess_h - db
    bounded = ddh
    if lam1 < -crit and lam3 > crit:
        bounded = min(bounded, hstar_hll * width / lam3)
        bounded = max(bounded, hstar_hll * width / lam1)
    elif lam1 >= crit:
        bounded = min(bounded, hstar_hll * width / lam1)
        bounded = max(bounded, -hl)
    elif lam3 <= -crit:
        bounded = min(bounded, hr)
        bounded = max(bounded, hstar_hll * width / lam3)
    d1 = deta - excess_h if bounded == ddh else dh - bounded

    # the steady wave's momentum-flux jump: -g hbar db (+ a part that vanishes at rest)
    ddphi = excess_phi - ghbar * db
    bounded = min(ddphi, grav * max(-hl * db, -hr * db))
    bounded = max(bounded, grav * min(-hl * db, -hr * db))
    dkin = hur * ur - hul * ul
    if bounded == ddphi:
        # dphi - ddphi = g hbar (dh + db) + dkin - excess_phi, with dh + db = deta
        d3 = ghbar * deta + dkin - excess_phi
    else:
        d3 = ghbar * dh + dkin - bounded
    d2 = hur - hul

    beta1 = (lam3 * d1 - d2) * iwidth
    beta3 = (d2 - lam1 * d1) * iwidth
    beta2 = d3 - (beta1 * lam1 * lam1 + beta3 * lam3 * lam3)

    for p in range(3):
        wave[0, p] = 0.0
        wave[mu, p] = 0.0
        wave[mv, p] = 0.0
    wave[0, 0] = beta1 * lam1
    wave[mu, 0] = beta1 * lam1 * lam1
    wave[mv, 0] = beta1 * lam1 * vl
    wave[mu, 1] = beta2
    wave[0, 2] = beta3 * lam3
    wave[mu, 2] = beta3 * lam3 * lam3
    wave[mv, 2] = beta3 * lam3 * vr
    # the rest of the tangential momentum flux jump goes downstream of the interface
    rest = (hur * vr - hul * vl) - (wave[mv, 0] + wave[mv, 2])
    if hul + wave[0, 0] <= 0.0:
        wave[mv, 0] += rest
    else:
        wave[mv, 2] += rest
    s[0] = lam1
    s[1] = lam2
    s[2] = lam3


@numba.njit
def split_fwaves(wave, s, amdq, apdq, zero_speed):
    """``amdq``/``apdq`` = sums of the f-waves by the sign of their speed (half each
    for a speed within ``zero_speed`` of zero, so that ``amdq + apdq`` is the sum of
    the waves)."""
    for m in range(3):
        a = 0.0
        b = 0.0
        for p in range(3):
            z = wave[m, p]
            if s[p] < -zero_speed:
                a += z
            elif s[p] > zero_speed:
                b += z
            else:
                a += 0.5 * z
                b += 0.5 * z
        amdq[m] = a
        apdq[m] = b


@numba.njit
def cell_state_geoclaw(q, aux, params):
    """Per-cell state of the solve: ``(u, v, sqrt(g h))`` of a wet cell (``h`` above
    ``dry_tolerance``), zeros for a dry one; computed once per cell and shared by the
    normal solves of its faces and the transverse solves into it."""
    h = q[0]
    if h > params[1]:
        return q[1] / h, q[2] / h, sqrt_or_nan(params[0] * h)
    return 0.0, 0.0, 0.0


@numba.njit
def _side(h, hun, cs, mu, mv, b, drytol):
    """One side of an interface for the solve: ``(h, hu, u, v, c, b)`` with the normal
    momentum ``hun`` and the cell state ``cs``; a dry cell has no water, no velocity,
    and its film counts as ground (so a lake beside a filmed bank stays at rest)."""
    if h > drytol:
        return h, hun, cs[mu - 1], cs[mv - 1], cs[2], b
    return 0.0, 0.0, 0.0, 0.0, cs[2], b + h


@numba.njit
def rpn2e_geoclaw(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq):
    """Normal solve given the cell states: George's augmented solver with GeoClaw's
    wet/dry wall rule."""
    grav = params[0]
    drytol = params[1]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, drytol, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    hl, hul, ul, vl, cl, bl = _side(hl, ql[mu], csl, mu, mv, auxl[0], drytol)
    hr, hur, ur, vr, cr, br = _side(hr, qr[mu], csr, mu, mv, auxr[0], drytol)
    # a dry neighbour above the wet surface: a wall unless the water would climb it
    wall_left = False
    wall_right = False
    if hr == 0.0:
        hm, _, _ = riemann_structure(hl, hl, ul, -ul, cl, cl, drytol, grav)
        if max(hl, hm) + bl < br:
            wall_right = True
            hr = hl
            hur = -hul
            ur = -ul
            vr = vl
            br = bl
            cr = cl
        elif hl + bl < br:
            br = hl + bl
    elif hl == 0.0:
        hm, _, _ = riemann_structure(hr, hr, -ur, ur, cr, cr, drytol, grav)
        if max(hr, hm) + br < bl:
            wall_left = True
            hl = hr
            hul = -hur
            ul = -ur
            vl = vr
            bl = br
            cl = cr
        elif hr + br < bl:
            bl = hr + br
    # Einfeldt speeds
    uhat = (cl * ul + cr * ur) / (cl + cr)
    chat = math.sqrt(0.5 * grav * (hl + hr))
    se1 = min(ul - cl, uhat - chat)
    se2 = max(ur + cr, uhat + chat)
    if hul == 0.0 and hur == 0.0 and vl == 0.0 and vr == 0.0 and hl + bl == hr + br:
        # at rest with one surface: the decomposition below gives exactly zero waves
        # (only its speeds could differ); skipping it is the common case before a wave
        # arrives
        fill_zero_normal(wave, s, amdq, apdq)
        s[0] = se1
        s[1] = 0.5 * (se1 + se2)
        s[2] = se2
        return
    augmented_fwaves(hl, hr, hul, hur, ul, ur, vl, vr, bl, br, cl, cr, se1, se2, drytol,
                     grav, mu, mv, wave, s)
    if wall_right:
        for p in range(1, 3):
            s[p] = 0.0
            for m in range(3):
                wave[m, p] = 0.0
    if wall_left:
        for p in range(2):
            s[p] = 0.0
            for m in range(3):
                wave[m, p] = 0.0
    split_fwaves(wave, s, amdq, apdq, _ZERO_SPEED)


@numba.njit
def rpt2e_geoclaw(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq, bmasdq,
                  bpasdq):
    """Transverse solve at the state of the receiving cell (its cell state: ``csl`` for
    ``imp == 1``, else ``csr``); walls of higher dry bottom."""
    drytol = params[1]
    h = ql[0] if imp == 1 else qr[0]
    if not (ql[0] >= 0.0 and qr[0] >= 0.0):
        fill_nan_transverse(bmasdq, bpasdq)
        return
    for m in range(3):
        bmasdq[m] = 0.0
        bpasdq[m] = 0.0
    if h <= drytol:
        return
    mn = 3 - ixy  # momentum in the transverse direction
    mt = ixy  # momentum along the interface normal
    if imp == 1:
        un = csl[mn - 1]
        ut = csl[mt - 1]
        c = csl[2]
    else:
        un = csr[mn - 1]
        ut = csr[mt - 1]
        c = csr[2]
    eta = h + aux2[0]
    m0, mn_, mt_, p0, pn, pt = transverse_split(un, ut, c, asdq, mn, mt)
    if eta >= aux1[0]:
        bmasdq[0] = m0
        bmasdq[mn] = mn_
        bmasdq[mt] = mt_
    if eta >= aux3[0]:
        bpasdq[0] = p0
        bpasdq[mn] = pn
        bpasdq[mt] = pt


def rpn2_geoclaw(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: George's augmented solver with GeoClaw's wet/dry wall rule
    (composed of :func:`cell_state_geoclaw` and :func:`rpn2e_geoclaw`)."""
    csl = cell_state_geoclaw(ql, auxl, params)
    csr = cell_state_geoclaw(qr, auxr, params)
    rpn2e_geoclaw(ixy, ql, qr, csl, csr, auxl, auxr, params, csl, wave, s, amdq, apdq)


def rpt2_geoclaw(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve at the state of the receiving cell; walls of higher dry bottom
    (composed of :func:`cell_state_geoclaw` of the receiving cell and
    :func:`rpt2e_geoclaw`, which reads only that cell's state)."""
    cs = cell_state_geoclaw(ql if imp == 1 else qr, aux2, params)
    rpt2e_geoclaw(ixy, imp, ql, qr, cs, cs, aux1, aux2, aux3, params, cs, asdq, bmasdq,
                  bpasdq)


def _velocity(q, params, m):
    h = q[:, 0]
    wet = h > params[1]
    return np.where(wet, q[:, m] / np.where(wet, h, 1.0), 0.0)


def _speed(q, aux, params):
    u = _velocity(q, params, 1)
    v = _velocity(q, params, 2)
    return np.sqrt(u * u + v * v)


def _surface(q, aux, params):
    """The surface elevation ``eta = h + b`` (equal to the bottom where dry)."""
    return q[:, 0] + aux[:, 0]


#: Output quantities (see ``RiemannSolver.derived_fields``).
GEOCLAW_DERIVED_FIELDS = {
    "depth": lambda q, aux, params: q[:, 0].copy(),
    "surface": _surface,
    "bottom": lambda q, aux, params: aux[:, 0].copy(),
    "velocity_x": lambda q, aux, params: _velocity(q, params, 1),
    "velocity_y": lambda q, aux, params: _velocity(q, params, 2),
    "speed": _speed,
}

#: Fields every GeoClaw-like solver record shares (the hydrostatic one included).
GEOCLAW_RECORD = dict(
    num_eqn=3,
    num_waves=3,
    rpt2=rpt2_geoclaw,
    num_aux=1,
    field_names=("h", "hu", "hv"),
    param_names=("grav", "dry_tolerance", "sea_level"),
    default_params={"grav": 9.81, "dry_tolerance": 1e-3, "sea_level": 0.0},
    fwave=True,
    wall_reflect=((1,), (2,)),
    positive=(0,),
    derived_fields=GEOCLAW_DERIVED_FIELDS,
    surface_interp=(0, 0),
    surface_dry="dry_tolerance",
)

geoclaw = RiemannSolver(
    name="geoclaw",
    rpn2=rpn2_geoclaw,
    num_cell_state=3,
    cell_state=cell_state_geoclaw,
    rpn2e=rpn2e_geoclaw,
    rpt2e=rpt2e_geoclaw,
    description="shallow water over topography aux[0], wet/dry: George's augmented "
    "solver (GeoClaw's; well-balanced, second order over smooth bottoms)",
    **GEOCLAW_RECORD,
)

register_riemann(geoclaw)
