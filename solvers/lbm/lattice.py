r"""The D3Q27 lattice: velocities, weights, opposite directions, equilibrium.

Directions are ordered ``0`` (rest), ``1..13`` (one of each pair of opposite
velocities: the 3 axis, 6 face-diagonal and 4 corner directions whose first nonzero
component is positive) and ``14..26`` (their opposites, ``OPP[q] = q + 13``), so a
kernel walks the 13 pairs ``(q, q + 13)``.  Weights are the tensor product of the D1Q3
weights ``(2/3, 1/6, 1/6)``:

.. math::

    w_0 = 8/27,\quad w_{|c|^2=1} = 2/27,\quad w_{|c|^2=2} = 1/54,\quad
    w_{|c|^2=3} = 1/216,\qquad c_s^2 = 1/3.

The equilibrium is the second-order truncation in the velocity (the one FluidX3D and
most D3Q27 codes use; Krüger et al., *The Lattice Boltzmann Method*, Springer 2017,
eq. 3.54):

.. math::

    f_q^{eq}(\rho, u) = w_q \rho \left(1 + \frac{c_q\cdot u}{c_s^2}
        + \frac{(c_q\cdot u)^2}{2 c_s^4} - \frac{u\cdot u}{2 c_s^2}\right).

The solver stores ``h_q = f_q - w_q`` (the distributions less those of rest at unit
density), which keeps the small deviations carried by FP32 storage out of the
rounding of the ``O(1)`` rest values.

>>> import numpy as np
>>> from forestpy.solvers.lbm.lattice import C, W, OPP
>>> float(W.sum()), int(np.abs(C[OPP] + C).max())
(1.0, 0)
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["C", "W", "OPP", "Q", "CS2", "equilibrium"]

Q = 27
CS2 = 1.0 / 3.0


def _directions():
    vecs = [v for v in itertools.product((-1, 0, 1), repeat=3) if any(v)]
    half = [v for v in vecs if next(x for x in v if x) > 0]
    half.sort(key=lambda v: (sum(x * x for x in v), [-x for x in v]))
    return np.array([(0, 0, 0)] + half + [tuple(-x for x in v) for v in half],
                    dtype=np.int64)


#: velocities, shape (27, 3), integer
C = _directions()
_W1 = {0: 2.0 / 3.0, 1: 1.0 / 6.0}
#: weights, shape (27,)
W = np.array([_W1[abs(a)] * _W1[abs(b)] * _W1[abs(c)] for a, b, c in C])
#: index of the opposite velocity
OPP = np.array([0] + list(range(14, 27)) + list(range(1, 14)), dtype=np.int64)
# the components as separate constant tables for the kernels
CX = np.ascontiguousarray(C[:, 0])
CY = np.ascontiguousarray(C[:, 1])
CZ = np.ascontiguousarray(C[:, 2])


def equilibrium(rho, u):
    """``f_q^eq`` for density ``rho`` (shape ``S``) and velocity ``u`` (shape
    ``(3, *S)``): an array of shape ``(27, *S)`` (NumPy, float64)."""
    rho = np.asarray(rho, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    if u.shape != (3, *rho.shape):
        raise ValueError(f"u must have shape (3, *rho.shape) = {(3, *rho.shape)}, "
                         f"got {u.shape}")
    cu = np.tensordot(C.astype(np.float64), u, axes=(1, 0))
    uu = (u * u).sum(axis=0)
    w = W.reshape((Q,) + (1,) * rho.ndim)
    return w * rho * (1.0 + 3.0 * cu + 4.5 * cu * cu - 1.5 * uu)
