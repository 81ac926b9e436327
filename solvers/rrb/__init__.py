"""Repeated Red-Black preconditioned conjugate gradients for 5-point SPD operators.

>>> from forestpy.solvers import rrb
>>> x, info = rrb.solve(rrb.stencil_poisson(64, 64), rhs, tol=1e-8)   # doctest: +SKIP

See :mod:`.ordering` (RRB ordering, r1/r2/b1/b2 storage), :mod:`.build` (the
incomplete factorisation with lumping), :mod:`.kernels` (CPU), :mod:`.gpu_kernels`
(GPU) and :mod:`.solver` (PCG, LinearOperator views).
"""

from .build import build_levels, check_stencil
from .ordering import from_quarters, level_shapes, max_levels, rrb_permutation, to_quarters
from .solver import RRBSolver, apply_stencil, solve, stencil_poisson

__all__ = [
    "RRBSolver",
    "solve",
    "stencil_poisson",
    "apply_stencil",
    "build_levels",
    "check_stencil",
    "max_levels",
    "level_shapes",
    "to_quarters",
    "from_quarters",
    "rrb_permutation",
]
