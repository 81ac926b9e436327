"""Linearised variational Boussinesq waves (uses forestpy.solvers.rrb)."""
