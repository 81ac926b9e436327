r"""Shallow water over topography: hydrostatic reconstruction + HLLE (``geoclaw_hr``).

The wet/dry solver forestpy used before George's augmented solver (:mod:`.riemann`,
the default ``geoclaw``); kept for comparison.  Its reconstruction works on cell
averages, so its bottom source terms are first-order accurate where water flows over a
sloping bottom (docs/geoclaw_solver.md).

.. math::

    h_t + (hu)_x + (hv)_y = 0,

    (hu)_t + \left(hu^2 + \tfrac12 g h^2\right)_x + (huv)_y = -g h\, b_x,

    (hv)_t + (huv)_x + \left(hv^2 + \tfrac12 g h^2\right)_y = -g h\, b_y,

with the bottom elevation :math:`b` in ``aux[0]`` and the surface :math:`\eta = h + b`.

Normal solve (``rpn2``): the hydrostatic reconstruction of Audusse et al. (2004) with
an HLLE flux (Einfeldt speeds) and an upwinded contact for the tangential momentum.
At an interface with bottoms :math:`b_l, b_r` and :math:`b^* = \max(b_l, b_r)`,

.. math::

    h_l^* = \max(0, \eta_l - b^*), \qquad h_r^* = \max(0, \eta_r - b^*),

the states :math:`q^*_{l,r} = h^*_{l,r}(1, u_{l,r}, v_{l,r})` have a flat bottom, and
the HLL fan between them gives the interface flux :math:`F^*`.  The left cell sees
:math:`F_l = F^* + (0, \tfrac g2 (h_l^2 - h_l^{*2}), 0)`, the right cell
:math:`F_r = F^* + (0, \tfrac g2 (h_r^2 - h_r^{*2}), 0)`, so in fluctuation form

.. math::

    \mathcal{A}^-\Delta q = \sum_{s^p < 0} \mathcal{Z}^p + (h_l^* - h_l)\,u_l\,(1, u_l, v_l),
    \qquad
    \mathcal{A}^+\Delta q = \sum_{s^p > 0} \mathcal{Z}^p + (h_r - h_r^*)\,u_r\,(1, u_r, v_r),

with the HLL f-waves :math:`\mathcal{Z}^1 = s^1 (q^\dagger - q_l^*)`,
:math:`\mathcal{Z}^3 = s^2 (q_r^* - q^\dagger)` (speeds :math:`s^1, s^2`) and a contact
:math:`\mathcal{Z}^2` at the Roe speed :math:`\hat u` carrying the jump of the
tangential momentum flux (the 1- and 3-waves carry :math:`v_l` and :math:`v_r`).
The pressure terms cancel analytically, so a lake at rest (:math:`\eta_l = \eta_r`,
:math:`u = v = 0`) gives fluctuations that are exactly zero, wet or dry, and the mass
fluctuations add up to :math:`(hu)_r - (hu)_l` (mass is conserved).  The first-order
update keeps depths non-negative under the CFL condition (Audusse et al. 2004,
Theorem 2.1, with the positively conservative HLLE flux of Einfeldt et al. 1991).  The
f-waves feed Clawpack's second-order corrections, except at wet/dry fronts and where the
reconstructed depths differ by more than a factor 10 (there the waves are zero: first
order).

Wet/dry (GeoClaw's rule, George 2008): a cell with :math:`h \le` ``dry_tolerance`` has
zero velocity; two such cells exchange nothing.  A dry cell whose bottom is at or above
the wet neighbour's surface is a wall: the Riemann problem is solved against the mirror
image of the wet state, the dry cell receives nothing and no mass crosses the interface.

Transverse solve (``rpt2``): the eigen-decomposition of the transverse flux Jacobian at
the state of the cell that received the fluctuation; the part moving towards a
transverse neighbour whose bottom is above that cell's surface is dropped (a wall).

Parameters: ``grav``, ``dry_tolerance`` (depth below which a cell is dry),
``sea_level`` (used by the refinement flags, initial conditions and output, not by the
Riemann solver).  Negative depths give NaN outputs, which the time stepper reports.

References
----------
E. Audusse, F. Bouchut, M.-O. Bristeau, R. Klein and B. Perthame, A fast and stable
well-balanced scheme with hydrostatic reconstruction for shallow water flows, *SIAM J.
Sci. Comput.* 25 (2004) 2050-2065.
B. Einfeldt, C.-D. Munz, P. L. Roe and B. Sjogreen, On Godunov-type methods near low
densities, *J. Comput. Phys.* 92 (1991) 273-295.
D. L. George, Augmented Riemann solvers for the shallow water equations over variable
topography with steady states and inundation, *J. Comput. Phys.* 227 (2008) 3089-3113.
D. S. Bale, R. J. LeVeque, S. Mitran and J. A. Rossmanith, A wave propagation method for
conservation laws and balance laws with spatially varying flux functions, *SIAM J. Sci.
Comput.* 24 (2003) 955-978.

Examples
--------
>>> >>> from forestpy.extensions.geoclaw.hydrostatic import geoclaw_hr, rpn2_hydrostatic
>>> params = geoclaw_hr.params_array()
>>> ql, qr = np.array([2.0, 0.0, 0.0]), np.array([0.5, 0.0, 0.0])  # lake at rest:
>>> auxl, auxr = np.array([-2.0]), np.array([-0.5])                 # eta = 0 on both sides
>>> wave, s = np.zeros((3, 3)), np.zeros(3)
>>> amdq, apdq = np.zeros(3), np.zeros(3)
>>> rpn2_hydrostatic(1, ql, qr, auxl, auxr, params, wave, s, amdq, apdq)
>>> bool(np.all(amdq == 0.0) and np.all(apdq == 0.0))
True
"""

from __future__ import annotations

import math

import numba
from forestpy.extensions.riemann._common import fill_trivial_normal

from forestpy.vtable import RiemannSolver, register_riemann

from .riemann import GEOCLAW_RECORD, split_fwaves

#: Below this ratio of the reconstructed depths across an interface (and at wet/dry
#: fronts) the waves are not passed to the second-order corrections (first order there).
_FRONT_RATIO = 0.1

__all__ = ["geoclaw_hr", "hll_fwaves", "rpn2_hydrostatic"]


@numba.njit
def hll_fwaves(hl, ul, vl, hr, ur, vr, grav, mu, mv, wave, s):
    """HLLE f-waves between two flat-bottom states ``h (1, u, v)`` (``h >= 0``).

    Writes ``wave[:, 0]`` (speed ``s[0] = s1``), the contact ``wave[:, 1]`` (only the
    tangential momentum ``mv``; speed ``s[1]``) and ``wave[:, 2]`` (``s[2] = s2``);
    their sum is the flux difference ``f(q_r) - f(q_l)``.  Einfeldt speeds; a dry side
    gets the dry-front speed ``u -/+ 2 sqrt(g h)`` of the wet one.  Two dry states give
    zeros.
    """
    for m in range(3):
        for p in range(3):
            wave[m, p] = 0.0
    if hl <= 0.0 and hr <= 0.0:
        for p in range(3):
            s[p] = 0.0
        return
    cl = math.sqrt(grav * hl)
    cr = math.sqrt(grav * hr)
    if hl <= 0.0:
        s1 = ur - 2.0 * cr
        s2 = ur + cr
        sm = ur
    elif hr <= 0.0:
        s1 = ul - cl
        s2 = ul + 2.0 * cl
        sm = ul
    else:
        sql = math.sqrt(hl)
        sqr = math.sqrt(hr)
        uhat = (sql * ul + sqr * ur) / (sql + sqr)
        chat = math.sqrt(0.5 * grav * (hl + hr))
        s1 = min(ul - cl, uhat - chat)
        s2 = max(ur + cr, uhat + chat)
        sm = uhat
    # jumps of the state and of the normal flux (mass, normal momentum)
    dq0 = hr - hl
    dq1 = hr * ur - hl * ul
    df0 = dq1
    df1 = (hr * ur * ur + 0.5 * grav * hr * hr) - (hl * ul * ul + 0.5 * grav * hl * hl)
    den = s2 - s1
    a0 = (s2 * dq0 - df0) / den  # q_dagger - q_l
    a1 = (s2 * dq1 - df1) / den
    c0 = (df0 - s1 * dq0) / den  # q_r - q_dagger
    c1 = (df1 - s1 * dq1) / den
    wave[0, 0] = s1 * a0
    wave[mu, 0] = s1 * a1
    wave[mv, 0] = s1 * a0 * vl
    wave[0, 2] = s2 * c0
    wave[mu, 2] = s2 * c1
    wave[mv, 2] = s2 * c0 * vr
    wave[mv, 1] = (hr * ur * vr - hl * ul * vl) - wave[mv, 0] - wave[mv, 2]
    s[0] = s1
    s[1] = sm
    s[2] = s2


def rpn2_hydrostatic(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: hydrostatic reconstruction + HLLE, GeoClaw's wet/dry wall rule."""
    grav = params[0]
    drytol = params[1]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, drytol, wave, s, amdq, apdq):
        return
    wet_l = hl > drytol
    wet_r = hr > drytol
    mu = ixy
    mv = 3 - ixy
    ul = ql[mu] / hl if wet_l else 0.0
    vl = ql[mv] / hl if wet_l else 0.0
    ur = qr[mu] / hr if wet_r else 0.0
    vr = qr[mv] / hr if wet_r else 0.0
    bl = auxl[0]
    br = auxr[0]
    eta_l = hl + bl
    eta_r = hr + br
    if not wet_r and br >= eta_l:
        # wall on the right: the mirror image of the left state, nothing crosses
        hll_fwaves(hl, ul, vl, hl, -ul, vl, grav, mu, mv, wave, s)
        split_fwaves(wave, s, amdq, apdq, 0.0)
        amdq[0] = -hl * ul
        amdq[mv] = -hl * ul * vl
        for m in range(3):
            apdq[m] = 0.0
            for p in range(3):
                wave[m, p] = 0.0
        return
    if not wet_l and bl >= eta_r:
        # wall on the left
        hll_fwaves(hr, -ur, vr, hr, ur, vr, grav, mu, mv, wave, s)
        split_fwaves(wave, s, amdq, apdq, 0.0)
        apdq[0] = hr * ur
        apdq[mv] = hr * ur * vr
        for m in range(3):
            amdq[m] = 0.0
            for p in range(3):
                wave[m, p] = 0.0
        return
    bstar = max(bl, br)
    hls = max(0.0, eta_l - bstar)
    hrs = max(0.0, eta_r - bstar)
    hll_fwaves(hls, ul, vl, hrs, ur, vr, grav, mu, mv, wave, s)
    split_fwaves(wave, s, amdq, apdq, 0.0)
    if min(hls, hrs) <= max(drytol, _FRONT_RATIO * max(hls, hrs)):
        # a wet/dry front or a steep depth jump: first order (no waves for the
        # second-order corrections; the limiters of the neighbouring interfaces then
        # see a zero upwind wave), which keeps thin layers from being drained
        for m in range(3):
            for p in range(3):
                wave[m, p] = 0.0
    # hydrostatic reconstruction: the pressure terms cancel analytically
    dl = (hls - hl) * ul
    dr = (hr - hrs) * ur
    amdq[0] += dl
    amdq[mu] += dl * ul
    amdq[mv] += dl * vl
    apdq[0] += dr
    apdq[mu] += dr * ur
    apdq[mv] += dr * vr


geoclaw_hr = RiemannSolver(
    name="geoclaw_hr",
    rpn2=rpn2_hydrostatic,
    description="shallow water over topography aux[0], wet/dry: hydrostatic "
    "reconstruction + HLLE (well-balanced, positive; first order over sloping bottoms)",
    **GEOCLAW_RECORD,
)

register_riemann(geoclaw_hr)
