"""forestpy: adaptive quadtree-forest patches for hyperbolic PDEs, batched on CPU and GPU."""

from forestpy.simulation import Domain, Simulation, StateError
from forestpy.vtable import RiemannSolver, available_riemann, get_riemann, register_riemann

__version__ = "0.1.0"

__all__ = ["Simulation", "Domain", "StateError", "RiemannSolver", "register_riemann",
           "get_riemann", "available_riemann", "__version__"]
