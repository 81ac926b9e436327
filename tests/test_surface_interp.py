"""Ghost filling and regrids through the surface ``h + b`` (RiemannSolver.surface_interp).

A lake at rest over a non-linear bottom: the depth is not linear, so interpolating it
at coarse-fine ghosts and in regrids breaks the flat surface; interpolating the surface
keeps it flat to round-off.  Near a shoreline, regrids keep volume and positivity.
"""

import dataclasses

import numpy as np
import pytest

from forestpy import Domain, Simulation
from forestpy.vtable import get_riemann


def bottom_average(x, y, dx, dy):
    """Exact cell averages of b = -0.6 + 0.5 sin(4x) cos(3y): a coarse cell's average
    is the mean of its four children's, to round-off."""
    x0, x1, y0, y1 = x - dx / 2, x + dx / 2, y - dy / 2, y + dy / 2
    sx = (np.cos(4 * x0) - np.cos(4 * x1)) / (4 * dx)
    cy = (np.sin(3 * y1) - np.sin(3 * y0)) / (3 * dy)
    return -0.6 + 0.5 * sx * cy


def solver(surface: bool):
    base = get_riemann("shallow_roe")
    return dataclasses.replace(
        base, name=f"roe_aux_{surface}", num_aux=1,
        surface_interp=(0, 0) if surface else None,
    )


def lake(surface: bool, level: float = 0.0, **options):
    def setaux(x, y, dx, dy):
        return bottom_average(x, y, dx, dy)[None]

    # refinement driven by the test; every unflagged patch coarsens at a regrid
    control = {"refine": lambda geom: np.zeros(geom.npatch, bool)}
    sim = Simulation(
        solver(surface), qinit=lambda x, y: np.stack([0 * x + 1, 0 * x, 0 * x]),
        domain=Domain((0.0, 0.0), (1.0, 1.0)), bc="wall", params={"grav": 9.81},
        setaux=setaux, mx=8, min_level=1, max_level=3,
        tag=lambda q, aux, geom, t: control["refine"](geom), coarsen_threshold=1e9,
        **options,
    )
    sim.control = control
    b = sim.aux[:, 0]  # the depth is set from the cell-averaged bottom
    sim.q[:, 0] = np.maximum(level - b, 0.0)
    sim.q[:, 1:] = 0.0
    return sim


def refine_left_half(sim):
    """Refine the patches left of x = 0.5 to the finest level, through regrids."""
    for _ in range(sim.max_level - sim.min_level):
        centres = sim.centers_host[0][:, sim.mbc, sim.mbc]
        sim.control["refine"] = lambda geom, f=centres < 0.5: f
        sim.regrid()


def surface_error(sim, ghosts: bool):
    eta = sim.q[:, 0] + sim.aux[:, 0]
    wet = sim.q[:, 0] > 0
    b = sim.mbc
    if not ghosts:
        eta, wet = eta[:, b:-b, b:-b], wet[:, b:-b, b:-b]
    return float(np.abs(eta[wet]).max())


@pytest.mark.parametrize("surface", [True, False])
def test_lake_at_rest_survives_refinement_and_ghost_fill_only_through_the_surface(surface):
    sim = lake(surface, level=0.0)
    volume = list(sim.totals().values())[0]
    refine_left_half(sim)
    assert set(np.unique(sim.geom.level)) == {2, 3}  # 2:1 balance lifts the right half
    sim.fill_ghosts()
    err_inner, err_all = surface_error(sim, False), surface_error(sim, True)
    volume_after = list(sim.totals().values())[0]
    assert abs(volume_after - volume) <= 1e-13 * volume
    if surface:
        assert err_inner < 1e-14 and err_all < 1e-14
    else:  # interpolating the depth itself puts steps into the surface
        assert err_all > 1e-4


def test_steps_keep_the_lake_at_rest_with_a_well_balanced_wall():
    """The bottom is mirrored at walls: the wall ghost state is a lake at rest too."""
    sim = lake(True, level=0.0)
    refine_left_half(sim)
    sim.fill_ghosts()
    b = sim.mbc
    # the ghost columns outside x = 0 are the mirror images of the first interior ones
    on_left = sim.geom.on_side(0)
    aux = sim.aux[on_left, 0]
    assert np.array_equal(aux[:, :, b - 1], aux[:, :, b])
    assert np.array_equal(sim.q[on_left, 0][:, :, b - 1], sim.q[on_left, 0][:, :, b])


def test_shoreline_regrid_keeps_volume_and_positivity():
    """Surface at 0.05 above the mean: dry land where the bottom rises above it."""
    sim = lake(True, level=-0.35)
    h = sim.q[:, 0, sim.mbc:-sim.mbc, sim.mbc:-sim.mbc]
    assert (h == 0).any() and (h > 0).any()  # a real shoreline
    volume = list(sim.totals().values())[0]
    refine_left_half(sim)
    h = sim.q[:, 0, sim.mbc:-sim.mbc, sim.mbc:-sim.mbc]
    assert h.min() >= 0.0
    assert abs(list(sim.totals().values())[0] - volume) <= 1e-13 * volume
    # and back: coarsen everything to the coarsest level
    for _ in range(2):
        sim.control["refine"] = lambda geom: np.zeros(geom.npatch, bool)
        sim.regrid()
    assert set(np.unique(sim.geom.level)) == {1}
    h = sim.q[:, 0, sim.mbc:-sim.mbc, sim.mbc:-sim.mbc]
    assert h.min() >= 0.0
    assert abs(list(sim.totals().values())[0] - volume) <= 1e-13 * volume


def test_surface_interp_indices_are_checked():
    with pytest.raises(ValueError, match="surface_interp"):
        dataclasses.replace(get_riemann("shallow_roe"), name="bad", surface_interp=(0, 0))
