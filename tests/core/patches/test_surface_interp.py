"""Ghost filling and regrids through the surface ``h + b`` (RiemannSolver.surface_interp).

A lake at rest over a non-linear bottom: the depth is not linear, so interpolating it
at coarse-fine ghosts and in regrids breaks the flat surface; interpolating the surface
keeps it flat to round-off.  Near a shoreline, regrids keep volume and positivity.
"""

import dataclasses

import numba
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


# ----------------------------------------------------------------------------- shorelines


def rest_depth(sim, level):
    """The rest state ``max(0, level - b)`` of the current grid, ghosts included."""
    return np.maximum(level - sim.aux[:, 0], 0.0)


def refine_all(sim):
    sim.control["refine"] = lambda geom: np.ones(geom.npatch, bool)
    sim.regrid()


def coarsen_all(sim):
    sim.control["refine"] = lambda geom: np.zeros(geom.npatch, bool)
    sim.regrid()


def at_rest(sim, level):
    """Set the rest state of the current grid (interiors and ghosts)."""
    sim.q[:, 0] = rest_depth(sim, level)
    sim.q[:, 1:] = 0.0


def ghost_entries(sim):
    plan = sim.ghost_plan
    return np.concatenate([plan.avg_dst, plan.interp_dst])


def test_ghost_fill_at_shorelines_gives_the_rest_state_and_leaves_interiors_alone():
    sim = lake(True, level=-0.35)
    refine_left_half(sim)
    at_rest(sim, -0.35)
    b = sim.mbc
    h = sim.q[:, 0, b:-b, b:-b]
    assert (h == 0).any() and (h > 0).any()
    inner = sim.q[:, :, b:-b, b:-b].copy()
    sim.q[...] = 123.0  # ghosts garbage...
    sim.q[:, :, b:-b, b:-b] = inner  # ...interiors at rest
    sim.fill_ghosts()
    assert np.array_equal(sim.q[:, :, b:-b, b:-b], inner)  # bit for bit
    p, j, i = ghost_entries(sim).T
    expected = np.maximum(-0.35 - sim.aux[p, 0, j, i], 0.0)
    assert len(p) > 100 and (expected == 0).any() and (expected > 0).any()
    assert np.abs(sim.q[p, 0, j, i] - expected).max() < 1e-15
    assert not sim.q[p, 1:, j, i].any()


def test_the_plain_surface_interpolation_lifts_shore_ghosts():
    """What the rule fixes: h + b of the dry cells (their bottom) mixed into the
    averages and interpolations of h + b lifts the ghost surface at shorelines."""
    from forestpy.patches import fill_ghosts

    sim = lake(True, level=-0.35)
    refine_left_half(sim)
    at_rest(sim, -0.35)
    w = sim.q.copy()
    w[:, 0] += sim.aux[:, 0]
    fill_ghosts(sim.ghost_plan, w, ())
    p, j, i = ghost_entries(sim).T
    h = np.maximum(w[p, 0, j, i] - sim.aux[p, 0, j, i], 0.0)
    assert np.abs(h - np.maximum(-0.35 - sim.aux[p, 0, j, i], 0.0)).max() > 1e-3


def test_dry_land_gets_no_water_from_an_interpolated_bottom():
    """A ghost stencil without wet cells takes the depth itself: all-dry land stays
    exactly dry in the ghosts (the surface h + b = b interpolated over a curved bottom
    and minus the ghost's own bottom would put water there)."""
    sim = lake(True, level=-2.0)  # below every bottom: no water anywhere
    refine_left_half(sim)
    sim.q[...] = 0.0
    sim.fill_ghosts()
    p, j, i = ghost_entries(sim).T
    assert not sim.q[p, :, j, i].any()
    w = sim.aux[:, :1].copy()  # what interpolating h + b would give
    from forestpy.patches import fill_ghosts

    fill_ghosts(sim.ghost_plan, w, ())
    assert (w[p, 0, j, i] - sim.aux[p, 0, j, i] > 1e-4).any()


def test_surface_dry_names_the_dry_tolerance():
    """A film at or below the declared dry tolerance on dry land is dry for the ghost
    rule (the ghost surface stays at the lake's); without the declaration it is wet
    water standing above the lake and lifts the ghosts."""
    base = get_riemann("shallow_roe")

    def run(declared):
        rs = dataclasses.replace(
            base, name=f"roe_dry_{declared}", num_aux=1, surface_interp=(0, 0),
            param_names=("grav", "drytol"), default_params={"grav": 9.81, "drytol": 1e-3},
            surface_dry="drytol" if declared else None,
        )
        sim = lake(True, level=-0.35)
        sim.riemann = rs
        sim.params = rs.params_array()
        refine_left_half(sim)
        at_rest(sim, -0.35)
        sim.q[:, 0] = np.where(sim.aux[:, 0] > -0.35, 5e-4, sim.q[:, 0])  # films on land
        sim.fill_ghosts()
        p, j, i = ghost_entries(sim).T
        h = sim.q[p, 0, j, i]
        wet = h > 1e-3
        return np.abs(h[wet] + sim.aux[p, 0, j, i][wet] + 0.35).max()

    assert run(True) < 1e-15
    assert run(False) > 1e-5


@pytest.mark.parametrize("kwargs, match", [
    (dict(surface_interp=(0, 0), surface_regrid="both"), "surface_regrid"),
    (dict(surface_interp=(0, 0), surface_dry="drytol"), "surface_dry"),
    (dict(surface_dry="grav"), "need surface_interp"),
    (dict(surface_regrid="rest"), "need surface_interp"),
    (dict(surface_velocity=(1, 2)), "surface_velocity.*needs surface_interp"),
    (dict(surface_interp=(0, 0), surface_velocity=(0, 1)), "other than the depth"),
    (dict(surface_interp=(0, 0), surface_velocity=(3,)), "components in 0..2"),
])
def test_surface_fields_are_checked(kwargs, match):
    base = dataclasses.replace(get_riemann("shallow_roe"), name="x", num_aux=1)
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(base, name="bad", **kwargs)


def test_rest_surface_for_volume_matches_bisection():
    from forestpy.patches.surface_regrid import _rest_surface_for_volume

    rng = np.random.default_rng(5)
    b = rng.normal(size=(3, 4, 2, 5, 2))
    b[0, 0, :, 0, :] = 0.25  # equal bottoms
    vol = rng.uniform(0, 6, size=(3, 4, 5))
    vol[1, 1, 1] = 0.0
    eta = _rest_surface_for_volume(b, vol, np)
    bb = b.transpose(0, 1, 3, 2, 4).reshape(3, 4, 5, 4)
    got = np.maximum(eta[..., None] - bb, 0).sum(-1)
    assert np.abs(got - vol).max() < 1e-14 and eta[1, 1, 1] == -np.inf
    lo, hi = bb.min(-1) - 1.0, bb.max(-1) + 7.0  # brute force: bisection
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        big = np.maximum(mid[..., None] - bb, 0).sum(-1) > vol
        lo, hi = np.where(big, lo, mid), np.where(big, mid, hi)
    pos = vol > 0
    assert np.abs(eta[pos] - hi[pos]).max() < 1e-13


def shore_lake(mode):
    sim = lake(True, level=-0.35)
    rs = dataclasses.replace(sim.riemann, name=f"roe_{mode}", surface_regrid=mode)
    sim.riemann = rs
    return sim


def volume(sim):
    return sim.totals()["h"]


def test_refining_a_shore_cannot_keep_both_volume_and_rest():
    """The coarse rest state holds less water than its partly dry children's:
    ``sum max(0, eta - b_c) > 4 (eta - mean b_c)`` when a child is dry.  "conserve"
    keeps the volume (shore families at the surface eta* < eta that holds it), "rest"
    the rest state (the volume grows by exactly that difference)."""
    out = {}
    for mode in ("conserve", "rest"):
        sim = shore_lake(mode)
        at_rest(sim, -0.35)
        sim.fill_ghosts()
        v0 = volume(sim)
        refine_all(sim)
        assert set(np.unique(sim.geom.level)) == {2}
        h = sim.q[:, 0, sim.mbc:-sim.mbc, sim.mbc:-sim.mbc]
        rest = rest_depth(sim, -0.35)[:, sim.mbc:-sim.mbc, sim.mbc:-sim.mbc]
        v_rest = float((rest.sum(axis=(1, 2)) * sim.geom.dx * sim.geom.dy).sum())
        out[mode] = (v0, volume(sim), v_rest, np.abs(h - rest).max(), h.min())
    v0, v1, v_rest, off, low = out["conserve"]
    assert abs(v1 - v0) <= 1e-14 * v0 and off > 1e-3 and low >= 0.0
    assert v_rest > v0 * (1 + 5e-4)  # the difference is real (9.6e-4 here)
    v0, v1, v_rest, off, low = out["rest"]
    assert off < 1e-15 and abs(v1 - v_rest) <= 1e-14 * v0


@pytest.mark.parametrize("mode", ["conserve", "rest"])
def test_fine_rest_state_survives_coarsening_and_refinement(mode):
    """From the fine rest state: coarsen, refine.  "conserve" gives it back exactly
    (the coarse cells hold the fine volume; eta* is then the lake's surface) and keeps
    the volume; "rest" gives it back exactly too (coarse cells at the coarse rest
    state)."""
    sim = shore_lake(mode)
    refine_all(sim)
    at_rest(sim, -0.35)
    sim.fill_ghosts()
    b = sim.mbc
    before = sim.q[:, :, b:-b, b:-b].copy()
    v0 = volume(sim)
    coarsen_all(sim)
    assert set(np.unique(sim.geom.level)) == {1}
    if mode == "conserve":
        assert abs(volume(sim) - v0) <= 1e-14 * v0
    else:
        h = sim.q[:, 0, b:-b, b:-b]
        assert np.abs(h - rest_depth(sim, -0.35)[:, b:-b, b:-b]).max() < 1e-15
        assert volume(sim) < v0 * (1 - 1e-4)
    sim.fill_ghosts()
    refine_all(sim)
    assert np.abs(sim.q[:, :, b:-b, b:-b] - before).max() < 1e-14
    if mode == "conserve":
        assert abs(volume(sim) - v0) <= 1e-14 * v0


def test_conservative_shore_regrid_keeps_momentum_and_volume():
    """A moving flow over the shore, refined and coarsened in "conserve" mode: volume
    and both momenta to round-off; the shore families move at their parent's
    velocity."""
    sim = shore_lake("conserve")
    x, y = sim.centers_host
    h = rest_depth(sim, -0.3)
    sim.q[:, 0] = h
    sim.q[:, 1] = h * np.sin(5 * x + 1)
    sim.q[:, 2] = h * np.cos(4 * y)
    sim.fill_ghosts()
    t0 = sim.totals()
    refine_all(sim)
    t1 = sim.totals()
    coarsen_all(sim)
    t2 = sim.totals()
    for key in ("h", "hu", "hv"):
        scale = abs(t0[key]) + t0["h"]
        assert abs(t1[key] - t0[key]) <= 1e-14 * scale
        assert abs(t2[key] - t0[key]) <= 1e-14 * scale
    assert sim.q[:, 0].min() >= 0.0


@pytest.mark.skipif(not numba.config.ENABLE_CUDASIM, reason="the CUDA simulator is off")
def test_cpu_and_gpu_simulator_agree_on_shore_ghosts_and_regrids():
    flags = {"which": "none"}

    def tag(q, aux, geom, t):
        return {"none": geom.xlower < -1, "left": geom.xlower < 0.5,
                "all": geom.xlower > -1}[flags["which"]]

    def run(backend):
        flags["which"] = "none"
        sim = Simulation(
            dataclasses.replace(solver(True), name="roe_gpu_rest", surface_regrid="rest"),
            qinit=lambda x, y: np.stack([0 * x, 0 * x, 0 * x]),
            domain=Domain((0.0, 0.0), (1.0, 1.0)), bc="wall", params={"grav": 9.81},
            setaux=lambda x, y, dx, dy: bottom_average(x, y, dx, dy)[None], mx=4,
            min_level=1, max_level=2, backend=backend, regrid_interval=0, tag=tag,
            coarsen_threshold=1e9,
        )
        flags["which"] = "left"
        sim.regrid()  # the left half to level 2
        assert sim.ghost_plan.counts["average"] and sim.ghost_plan.counts["interpolate"]
        be = sim.backend
        aux = be.to_host(sim.aux)
        x = be.to_host(sim.centers[0])
        h = np.maximum(-0.35 - aux[:, 0], 0.0)
        sim.q = be.to_device(np.stack([h, h * np.sin(7 * x), 0 * x], axis=1))
        sim.fill_ghosts()
        filled = be.to_host(sim.q).copy()
        flags["which"] = "all"
        sim.regrid()  # the right half (shore families included) to level 2
        return filled, be.to_host(sim.q), sim

    (f_c, q_c, cpu), (f_g, q_g, gpu) = run("cpu"), run("gpu")
    assert cpu.regrids == gpu.regrids == 2
    assert (f_c[:, 0] == 0).any() and (f_c[:, 0] > 0).any()
    assert np.abs(f_g - f_c).max() < 1e-15
    b = cpu.mbc
    assert np.abs(q_g[:, :, b:-b, b:-b] - q_c[:, :, b:-b, b:-b]).max() < 1e-15
