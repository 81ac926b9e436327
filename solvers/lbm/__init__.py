"""D3Q27 lattice Boltzmann on a uniform 3D grid, CPU and GPU from one source.

>>> from forestpy.solvers.lbm import LBM
>>> sim = LBM((16, 16, 16), tau=0.6, collision="trt")     # doctest: +SKIP
>>> sim.run(100); u = sim.velocity()                       # doctest: +SKIP

See :mod:`.lattice` (velocities, weights, equilibrium), :mod:`.kernels` (the cell
update, AA-pattern streaming, BGK/TRT collision, Guo forcing, bounce-back) and
:mod:`.solver` (the :class:`LBM` object); docs/lbm.md.
"""

from .lattice import CS2, OPP, C, Q, W, equilibrium
from .solver import COLLISIONS, LBM, MAGIC_TRT, sphere

__all__ = ["LBM", "COLLISIONS", "MAGIC_TRT", "sphere", "C", "W", "OPP", "Q", "CS2", "equilibrium"]
