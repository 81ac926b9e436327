"""Reference (fine 1D / exact) solutions used to validate forestpy solvers."""

from .radial_shallow_water import (
    cell_centers,
    radial_mass,
    sample,
    solve_radial,
    solve_radial_dam,
)

__all__ = ["cell_centers", "radial_mass", "sample", "solve_radial", "solve_radial_dam"]
