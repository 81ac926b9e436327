"""Pointwise Riemann solvers, registered by name (see forestpy.vtable)."""
