r"""Linear acoustics in two dimensions with constant density and bulk modulus.

.. math::

    p_t + K (u_x + v_y) = 0, \qquad
    \rho\, u_t + p_x = 0, \qquad
    \rho\, v_t + p_y = 0,

for :math:`q = (p, u, v)`, i.e. :math:`q_t + A q_x + B q_y = 0` with

.. math::

    A = \begin{pmatrix} 0 & K & 0 \\ 1/\rho & 0 & 0 \\ 0 & 0 & 0 \end{pmatrix}, \qquad
    B = \begin{pmatrix} 0 & 0 & K \\ 0 & 0 & 0 \\ 1/\rho & 0 & 0 \end{pmatrix}.

With the sound speed :math:`c = \sqrt{K/\rho}` and impedance :math:`Z = \rho c`, the
eigenvectors of :math:`A` for the speeds :math:`\mp c` are
:math:`r^{1,2} = (\mp Z, 1, 0)^T`, and the jump :math:`\Delta q` splits as

.. math::

    \alpha^1 = \frac{-\Delta p + Z \Delta u}{2Z}, \qquad
    \alpha^2 = \frac{\Delta p + Z \Delta u}{2Z}.

The third eigenvalue of :math:`A` is zero (the jump in the tangential velocity); it
carries no fluctuation, so only the two acoustic waves are returned and
:math:`\mathcal{W}^1 + \mathcal{W}^2` equals :math:`\Delta q` in :math:`p` and the
normal velocity only.  The transverse solver splits :math:`\mathcal{A}^*\Delta q`
the same way with the eigenvectors of :math:`B` (``ixy == 1``) or :math:`A`
(``ixy == 2``).

References
----------
R. J. LeVeque, *Finite Volume Methods for Hyperbolic Problems*, Cambridge University
Press, 2002, Sections 2.7-2.8, 3.9 and 18.4 (the 2D acoustics example of Ch. 21).
"""

from __future__ import annotations

import math

from forestpy.vtable import RiemannSolver

__all__ = ["acoustics", "rpn2_acoustics", "rpt2_acoustics"]


def rpn2_acoustics(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: two acoustic waves at speeds ``-c`` and ``+c``."""
    rho = params[0]
    bulk = params[1]
    c = math.sqrt(bulk / rho)
    z = rho * c
    mu = ixy
    mv = 3 - ixy
    dp = qr[0] - ql[0]
    du = qr[mu] - ql[mu]
    a1 = (-dp + z * du) / (2.0 * z)
    a2 = (dp + z * du) / (2.0 * z)

    wave[0, 0] = -a1 * z
    wave[mu, 0] = a1
    wave[mv, 0] = 0.0
    s[0] = -c

    wave[0, 1] = a2 * z
    wave[mu, 1] = a2
    wave[mv, 1] = 0.0
    s[1] = c

    for m in range(3):
        amdq[m] = s[0] * wave[m, 0]
        apdq[m] = s[1] * wave[m, 1]


def rpt2_acoustics(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: split ``asdq`` into down- and up-going acoustic waves."""
    rho = params[0]
    bulk = params[1]
    c = math.sqrt(bulk / rho)
    z = rho * c
    mu = ixy
    mv = 3 - ixy  # velocity component normal to the transverse direction
    b1 = (-asdq[0] + z * asdq[mv]) / (2.0 * z)
    b2 = (asdq[0] + z * asdq[mv]) / (2.0 * z)

    bmasdq[0] = c * b1 * z
    bmasdq[mu] = 0.0
    bmasdq[mv] = -c * b1

    bpasdq[0] = c * b2 * z
    bpasdq[mu] = 0.0
    bpasdq[mv] = c * b2


acoustics = RiemannSolver(
    name="acoustics",
    num_eqn=3,
    num_waves=2,
    rpn2=rpn2_acoustics,
    rpt2=rpt2_acoustics,
    num_aux=0,
    field_names=("p", "u", "v"),
    param_names=("rho", "bulk"),
    default_params={"rho": 1.0, "bulk": 4.0},
    fwave=False,
    wall_reflect=((1,), (2,)),
    description="constant-coefficient linear acoustics (p, u, v), density rho, bulk modulus K",
)
