r"""The two-layer fluxes as pointwise Riemann solvers of forestpy's quadtree patches, so
two-layer flows run through :class:`forestpy.Simulation` (adaptive refinement, CPU and
GPU backends) with the same physics as the triangle solver.

``q = (h1, q1x, q1y, h2, q2x, q2y)``, ``aux[0] = b`` the bottom elevation (as the
framework's surface rules and GeoClaw have it: the triangle solver's depth below the
reference level is ``H = -b``), parameters ``grav`` and ``r`` (``rho1 / rho2``).  The
normal solve calls :func:`~forestpy.solvers.tworoe.physics.flux_edge_irroe` (``two_layer_roe``) or
:func:`~forestpy.solvers.tworoe.physics.flux_edge_ifcp` (``two_layer_ifcp``) and
returns its fluctuations: ``amdq`` the left cell's (mass: ``Phi - q_L``), ``apdq`` the
right cell's (``q_R - Phi``), so that each layer's mass is conserved.  These are
**first-order** solvers (``Simulation(..., order=1, transverse_waves=0)``): the two
"waves" are ``amdq / (-s)`` and ``apdq / s`` with ``s`` the largest speed, enough for
the CFL condition and the first-order update, not for second-order corrections.

Well-balanced across levels: the solvers declare ``surface_interp=(3, 0)``, so ghost
cells at coarse-fine interfaces and regrids average and interpolate the *interface*
``h2 + b`` (:mod:`forestpy.patches.surface_ghosts`, ``surface_regrid``) and take
``h2 = interface - b`` with the ghost cell's own bottom, and ``surface_velocity=(4,
5)``: the velocity bound of interpolated ghosts applies to the lower layer's momenta.
The upper layer's depth and momenta are interpolated as they are: in a two-layer lake
at rest ``h1`` is constant, so the ghosts are at rest exactly (the free surface is
``h1 + interface``).  The framework's shoreline rules (dry cells) are never reached:
both layers must stay wet.

    import forestpy.solvers.tworoe.riemann as tl
    sim = Simulation(tl.two_layer_roe, qinit=..., setaux=..., order=1,
                     transverse_waves=0, params={"grav": 9.81, "r": 0.9}, bc="wall")
"""

from __future__ import annotations

import numba

from forestpy.vtable import RiemannSolver

from .physics import flux_edge_ifcp, flux_edge_irroe

__all__ = ["rpn2_two_layer_ifcp", "rpn2_two_layer_roe", "two_layer_ifcp", "two_layer_roe"]


@numba.njit(inline="always")
def _fluctuations(mu, mv, ql, qr, flux, wave, s, amdq, apdq):
    """``amdq``, ``apdq``, two waves and their speeds from one edge solve ``flux`` (the
    tuple of :func:`.physics.flux_edge_irroe` / ``flux_edge_ifcp``)."""
    f1, f2, m1n, m1t, m2n, m2t, n1n, n1t, n2n, n2t, smax, _ = flux
    amdq[0] = f1 - ql[mu]
    amdq[mu] = m1n
    amdq[mv] = m1t
    amdq[3] = f2 - ql[3 + mu]
    amdq[3 + mu] = m2n
    amdq[3 + mv] = m2t
    apdq[0] = qr[mu] - f1
    apdq[mu] = n1n
    apdq[mv] = n1t
    apdq[3] = qr[3 + mu] - f2
    apdq[3 + mu] = n2n
    apdq[3 + mv] = n2t
    s[0] = -smax
    s[1] = smax
    for m in range(6):
        wave[m, 0] = amdq[m] / s[0]
        wave[m, 1] = apdq[m] / s[1]


def rpn2_two_layer_roe(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve with IR-Roe (see the module)."""
    mu = ixy
    mv = 3 - ixy
    flux = flux_edge_irroe(
        ql[0], ql[mu], ql[mv], ql[3], ql[3 + mu], ql[3 + mv], -auxl[0],
        qr[0], qr[mu], qr[mv], qr[3], qr[3 + mu], qr[3 + mv], -auxr[0], params[0], params[1])
    _fluctuations(mu, mv, ql, qr, flux, wave, s, amdq, apdq)


def rpn2_two_layer_ifcp(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve with IFCP (see the module)."""
    mu = ixy
    mv = 3 - ixy
    flux = flux_edge_ifcp(
        ql[0], ql[mu], ql[mv], ql[3], ql[3 + mu], ql[3 + mv], -auxl[0],
        qr[0], qr[mu], qr[mv], qr[3], qr[3 + mu], qr[3 + mv], -auxr[0], params[0], params[1])
    _fluctuations(mu, mv, ql, qr, flux, wave, s, amdq, apdq)


TWO_LAYER = dict(
    num_eqn=6,
    num_waves=2,
    num_aux=1,
    field_names=("h1", "q1x", "q1y", "h2", "q2x", "q2y"),
    param_names=("grav", "r"),
    default_params={"grav": 9.81, "r": 0.998},
    wall_reflect=((1, 4), (2, 5)),
    positive=(0, 3),
    conserved=(True, False, False, True, False, False),
    surface_interp=(3, 0),    # the lower layer's depth over the bottom aux[0]
    surface_velocity=(4, 5),  # its momenta
)

two_layer_roe = RiemannSolver(
    name="two_layer_roe", rpn2=rpn2_two_layer_roe,
    description="two-layer shallow water (first order): IR-Roe, aux[0] = bottom", **TWO_LAYER)
two_layer_ifcp = RiemannSolver(
    name="two_layer_ifcp", rpn2=rpn2_two_layer_ifcp,
    description="two-layer shallow water (first order): IFCP, aux[0] = bottom", **TWO_LAYER)
