"""Linearised variational Boussinesq waves (uses forestpy.solvers.rrb)."""

from .vbm import VBM, dispersion_omega, profile_coefficients, ship_pressure, solver_options

__all__ = ["VBM", "dispersion_omega", "profile_coefficients", "ship_pressure",
           "solver_options"]
