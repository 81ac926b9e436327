"""solvers/tworoe/riemann.py: the two-layer fluxes on forestpy's quadtree patches (first
order): a lake at rest over a bump stays at rest, on one level and across coarse-fine
interfaces (the lower layer through the framework's surface rule), each layer's mass is
conserved, and a y-invariant internal dam break matches the 1D reference with the same
flux."""

import numpy as np
import pytest
from forestpy.solvers.tworoe.reference import solve_1d
from forestpy.solvers.tworoe.riemann import two_layer_roe

from forestpy import Domain, Simulation
from forestpy.patches.ghost_plan import fill_ghosts


def _bump(x, y):
    r = np.hypot(x, y)
    return np.where(r < 0.2, 0.2 * (np.cos(4 * np.pi * r) + 1.0), 0.0)


def _interior(sim):
    m = sim.mbc
    return sim.q[:, :, m:-m, m:-m]


@pytest.mark.slow  # compiles the patch kernels for a 6-equation solver (~20 s)
def test_two_layer_flux_on_quadtree_patches():
    common = dict(bc="wall", order=1, transverse_waves=0, mx=8, min_level=3, max_level=3,
                  params={"grav": 9.81, "r": 0.9})

    def rest(x, y):
        b = _bump(x, y)
        z = 0 * x
        return np.stack([0.1 + z, z, z, 0.5 - b, z, z])

    sim = Simulation(two_layer_roe, qinit=rest, domain=Domain((-0.5, -0.5), (0.5, 0.5)),
                     setaux=lambda x, y, dx, dy: _bump(x, y)[None], t_final=0.3,
                     **common)
    sim.run()
    q = _interior(sim)
    assert sim.steps > 20
    assert np.abs(q[:, [1, 2, 4, 5]]).max() <= 1e-13
    eta2 = q[:, 3] + sim.aux[:, 0, sim.mbc:-sim.mbc, sim.mbc:-sim.mbc]
    assert np.abs(eta2 - 0.5).max() <= 1e-13 and np.abs(q[:, 0] - 0.1).max() <= 1e-13

    # an internal dam break along x, the same in every row
    def dam(x, y):
        h2 = np.where(x < 5.0, 0.6, 0.4)
        z = 0 * x
        return np.stack([1.0 - h2, z, z, h2, z, z])

    sim = Simulation(two_layer_roe, qinit=dam, domain=Domain((0.0, 0.0), (10.0, 10.0)),
                     setaux=lambda x, y, dx, dy: -np.ones((1,) + x.shape), t_final=2.0,
                     **{**common, "params": {"grav": 9.81, "r": 0.98}})
    m0 = sim.totals()
    sim.run()
    m1 = sim.totals()
    for k in ("h1", "h2"):
        assert abs(m1[k] - m0[k]) <= 1e-13 * m0[k]
    # the global field, rows identical
    n = 64
    field = np.empty((6, n, n))
    lvl = sim.forest.level
    assert (lvl == 3).all()
    step = np.unique(sim.forest.x)[1]  # the forest counts in finest-level units
    ix, iy = sim.forest.x // step, sim.forest.y // step
    assert ix.max() == 7 and iy.max() == 7
    q = _interior(sim)
    for p in range(len(q)):
        field[:, iy[p] * 8:(iy[p] + 1) * 8, ix[p] * 8:(ix[p] + 1) * 8] = q[p]
    assert np.abs(field[3] - field[3, :1]).max() <= 1e-14
    assert np.abs(field[[2, 5]]).max() <= 1e-14
    x = (np.arange(n) + 0.5) * 10.0 / n
    ref = solve_1d(1.0 - np.where(x < 5, 0.6, 0.4), np.where(x < 5, 0.6, 0.4), np.ones(n),
                   10.0, 2.0, r=0.98)
    # the same scheme in 1D; the time steps differ (the framework's CFL rule)
    assert np.abs(field[3, 0] - ref[2]).max() <= 0.02 * 0.2
    assert np.abs(field[3, 0] - 0.5).max() > 0.05  # the interface moved


def _rest(x, y):
    """Surface 0.6, interface 0.5 over the bump (h1 = 0.1 everywhere)."""
    b = _bump(x, y)
    z = 0 * x
    return np.stack([0.1 + z, z, z, 0.5 - b, z, z])


@pytest.mark.slow  # compiles the patch kernels for a 6-equation solver (~20 s)
def test_two_layer_lake_at_rest_across_coarse_fine_interfaces():
    """Levels 1 and 2, the interface x = 0 between them across the bump, a few hundred
    steps: surface, interface and velocities at rest to 1e-13.  Interpolating the
    lower depth itself (the plain ghost fill) would put steps into the interface."""
    sim = Simulation(two_layer_roe, qinit=_rest, domain=Domain((-0.5, -0.5), (0.5, 0.5)),
                     setaux=lambda x, y, dx, dy: _bump(x, y)[None], bc="wall", order=1,
                     transverse_waves=0, mx=8, min_level=1, max_level=2,
                     tag=lambda q, aux, geom, t: geom.xlower < 0.0, coarsen_threshold=1e9,
                     params={"grav": 9.81, "r": 0.9}, t_final=10.0, regrid_interval=0)
    lev, x0 = sim.geom.level, sim.geom.xlower
    assert set(lev[x0 < 0].tolist()) == {2} and set(lev[x0 >= 0].tolist()) == {1}
    m = sim.mbc

    def interface_error(q, ghosts):
        eta2 = q[:, 3] + sim.aux[:, 0]
        if not ghosts:
            eta2 = eta2[:, m:-m, m:-m]
        return float(np.abs(eta2 - 0.5).max())

    plain = sim.q.copy()
    fill_ghosts(sim.layout.ghost_plan, plain, two_layer_roe.positive)
    assert interface_error(plain, ghosts=True) > 1e-4  # what the plain fill gives
    sim.fill_ghosts()
    assert interface_error(sim.q, ghosts=True) <= 1e-14
    sim.run(max_steps=200)
    assert sim.steps == 200
    q = _interior(sim)
    assert np.abs(q[:, [1, 2, 4, 5]]).max() <= 1e-13
    assert interface_error(sim.q, ghosts=False) <= 1e-13
    assert np.abs(q[:, 0] - 0.1).max() <= 1e-13
