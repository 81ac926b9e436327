"""Pointwise Riemann solvers, registered by name (see forestpy.vtable).

Importing this package registers the built-in solvers:

``advection``, ``advection_variable``
    Scalar advection with constant velocity, and the color equation with edge
    velocities in aux (:mod:`.advection`).
``acoustics``
    Constant-coefficient linear acoustics (:mod:`.acoustics`).
``shallow_roe``, ``shallow_hlle``
    Shallow water, Roe with entropy fix and HLLE (:mod:`.shallow_roe`,
    :mod:`.shallow_hlle`).
``euler``
    2D compressible Euler, ideal gas, Roe with entropy fix (:mod:`.euler`).
"""

from forestpy.vtable import register_riemann

from .acoustics import acoustics
from .advection import advection, advection_variable
from .euler import euler
from .shallow_hlle import shallow_hlle
from .shallow_roe import shallow_roe

__all__ = [
    "acoustics",
    "advection",
    "advection_variable",
    "euler",
    "shallow_hlle",
    "shallow_roe",
    "BUILTIN_SOLVERS",
]

BUILTIN_SOLVERS = (advection, advection_variable, acoustics, shallow_roe, shallow_hlle, euler)

for _solver in BUILTIN_SOLVERS:
    register_riemann(_solver)
del _solver
