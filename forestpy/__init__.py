"""forestpy: adaptive quadtree-forest patches for hyperbolic PDEs, batched on CPU and GPU.

This module is the composition root: the framework (core and driver, see
docs/architecture.md) names no plugin; here the built-in ones are registered, lazily
(imported on the first registry lookup).  Third-party plugins use the entry-point groups
``forestpy.riemann`` and ``forestpy.methods``.
"""

from forestpy.simulation import Domain, Simulation, StateError
from forestpy.version import __version__
from forestpy.vtable import (
    RiemannSolver,
    available_riemann,
    get_riemann,
    register_config_kind,
    register_method,
    register_plugin_module,
    register_riemann,
)

register_plugin_module("forestpy.extensions.riemann")
register_method("clawpack", "forestpy.solvers.clawpack.solver:ClawpackSolver")
register_config_kind("geoclaw", "forestpy.extensions.geoclaw.config:demo_from_config")

__all__ = ["Simulation", "Domain", "StateError", "RiemannSolver", "register_riemann",
           "get_riemann", "available_riemann", "register_method", "__version__"]
