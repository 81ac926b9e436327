r"""Scalar advection in two dimensions, constant and variable velocity.

Constant velocity (``advection``):

.. math::

    q_t + u\, q_x + v\, q_y = 0,

with one wave :math:`\mathcal{W} = q_r - q_l` moving at the normal velocity and the
fluctuations :math:`\mathcal{A}^\mp\Delta q = \min/\max(s, 0)\,\mathcal{W}`.

Variable velocity (``advection_variable``), the non-conservative "color equation"

.. math::

    q_t + u(x, y)\, q_x + v(x, y)\, q_y = 0,

with the velocities given at the cell edges (LeVeque 1997; LeVeque 2002, Sec. 9.5 and
20.5): ``aux[0]`` is :math:`u` at the left edge of the cell and ``aux[1]`` is
:math:`v` at its bottom edge, so the normal velocity at an interface is stored in the
cell to the right of (or above) it.  Here :math:`\mathcal{A}^-\Delta q +
\mathcal{A}^+\Delta q = u_{i-1/2}(q_r - q_l)`, not a flux difference.  The transverse
solver moves the fluctuation entering a cell up or down with that cell's own edge
velocities: :math:`\mathcal{B}^-\mathcal{A}^*\Delta q = \min(v_{\text{bottom}}, 0)\,
\mathcal{A}^*\Delta q` and :math:`\mathcal{B}^+\mathcal{A}^*\Delta q =
\max(v_{\text{top}}, 0)\,\mathcal{A}^*\Delta q`.

References
----------
R. J. LeVeque, *Finite Volume Methods for Hyperbolic Problems*, Cambridge University
Press, 2002, Sections 9.5, 20.5 and 21.
R. J. LeVeque, Wave propagation algorithms for multidimensional hyperbolic systems,
*J. Comput. Phys.* 131 (1997) 327-353.
"""

from __future__ import annotations

from forestpy.vtable import RiemannSolver

__all__ = [
    "advection",
    "advection_variable",
    "rpn2_advection",
    "rpn2_advection_variable",
    "rpt2_advection",
    "rpt2_advection_variable",
]


def rpn2_advection(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve, constant velocity ``params = (u, v)``."""
    sn = params[ixy - 1]
    w = qr[0] - ql[0]
    wave[0, 0] = w
    s[0] = sn
    amdq[0] = min(sn, 0.0) * w
    apdq[0] = max(sn, 0.0) * w


def rpt2_advection(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve, constant velocity: split ``asdq`` by the transverse velocity."""
    st = params[2 - ixy]
    bmasdq[0] = min(st, 0.0) * asdq[0]
    bpasdq[0] = max(st, 0.0) * asdq[0]


def rpn2_advection_variable(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve, edge velocities in aux (color equation).

    The velocity normal to the interface is ``auxr[ixy - 1]``: the left-edge ``u`` (or
    bottom-edge ``v``) of the cell to the right of (above) the interface.
    """
    sn = auxr[ixy - 1]
    w = qr[0] - ql[0]
    wave[0, 0] = w
    s[0] = sn
    amdq[0] = min(sn, 0.0) * w
    apdq[0] = max(sn, 0.0) * w


def rpt2_advection_variable(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve, edge velocities in aux.

    ``aux2`` is the cell that receives ``asdq`` and ``aux3`` its neighbour in the
    positive transverse direction, so the transverse edge velocities of that cell are
    ``aux2[k]`` (bottom/left edge) and ``aux3[k]`` (top/right edge), with ``k = 1`` for
    ``ixy == 1`` (transverse direction y) and ``k = 0`` for ``ixy == 2``.
    """
    k = 2 - ixy
    bmasdq[0] = min(aux2[k], 0.0) * asdq[0]
    bpasdq[0] = max(aux3[k], 0.0) * asdq[0]


advection = RiemannSolver(
    name="advection",
    num_eqn=1,
    num_waves=1,
    rpn2=rpn2_advection,
    rpt2=rpt2_advection,
    num_aux=0,
    field_names=("q",),
    param_names=("u", "v"),
    default_params={"u": 1.0, "v": 0.5},
    fwave=False,
    description="scalar advection q_t + u q_x + v q_y = 0 with constant velocity (u, v)",
)

advection_variable = RiemannSolver(
    name="advection_variable",
    num_eqn=1,
    num_waves=1,
    rpn2=rpn2_advection_variable,
    rpt2=rpt2_advection_variable,
    num_aux=2,
    field_names=("q",),
    param_names=(),
    default_params={},
    fwave=False,
    conserved=(False,),
    description=(
        "color equation q_t + u q_x + v q_y = 0 with edge velocities in aux "
        "(aux[0] = u at the left edge, aux[1] = v at the bottom edge)"
    ),
)
