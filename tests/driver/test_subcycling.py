"""Local time stepping (forestpy.subcycling): each level takes its own time step."""

import math

import numpy as np
import pytest

from forestpy import Domain, Simulation


def interior(sim):
    b = sim.mbc
    return sim.q[:, :, b:-b, b:-b]


def test_finer_levels_take_one_or_two_steps_per_coarser_step(radial_dam):
    opts = dict(mx=8, min_level=2, max_level=4, t_final=0.2, regrid_interval=0)
    sub = radial_dam.setup(**opts).run()
    glob = radial_dam.setup(**opts, subcycle=False).run()
    assert sub.subcycling and not glob.subcycling
    assert sub.patches_per_level() == glob.patches_per_level()  # no regrid: one grid
    counts = sub._subcycler.level_steps
    assert sorted(counts) == [2, 3, 4]
    assert counts[2] <= counts[3] <= 2 * counts[2] and counts[3] <= counts[4] <= 2 * counts[3]
    assert counts[4] > counts[2] == sub.steps
    assert sub.t == pytest.approx(0.2) and glob.t == pytest.approx(0.2)
    per_level = sub.patches_per_level()
    assert sub.cell_updates == sum(64 * per_level[lv] * counts[lv] for lv in counts)
    assert sub.cell_updates < glob.cell_updates


def test_conserves_totals_to_round_off_through_regrids(radial_dam):
    sim = radial_dam.setup(mx=8, min_level=2, max_level=5, t_final=0.6, regrid_interval=1)
    assert sim.subcycle
    sim.run()
    assert sim.subcycling and sim.regrids >= 10
    assert len(sim.patches_per_level()) >= 3
    t0, t1 = sim.totals_initial, sim.totals()
    scale = abs(t0["h"])
    for name in ("h", "hu", "hv"):
        assert abs(t1[name] - t0[name]) <= 1e-12 * scale, (name, t0[name], t1[name])


def test_without_the_time_sync_mass_drifts(radial_dam, monkeypatch):
    """The conservation test above can fail: with the coarse cells left with their own
    fluxes the totals drift far above round-off."""
    import forestpy.subcycling as subcycling

    monkeypatch.setattr(subcycling, "correct_coarse", lambda *a, **k: None)
    sim = radial_dam.setup(mx=8, min_level=2, max_level=4, t_final=0.3).run()
    t0, t1 = sim.totals_initial["h"], sim.totals()["h"]
    assert abs(t1 - t0) > 1e-8 * abs(t0)


def test_partial_regrids_leave_the_coarser_levels_as_they_are(radial_dam):
    """Regrids between the coarse steps change only the levels at one time."""
    sim = radial_dam.setup(mx=8, min_level=2, max_level=5, t_final=0.3, regrid_interval=1)
    seen = []
    original = sim.regrid

    def regrid(frozen_below=None, carry=None):
        before = sim.forest
        changed = original(frozen_below=frozen_below, carry=carry)
        if frozen_below is not None:
            seen.append(changed)
            keep_a, keep_b = before.level < frozen_below, sim.forest.level < frozen_below
            assert np.array_equal(before.keys[keep_a], sim.forest.keys[keep_b])
            assert np.array_equal(before.level[keep_a], sim.forest.level[keep_b])
        return changed

    sim.regrid = regrid
    sim.run()
    assert any(seen)  # some partial regrid changed the finer levels
    t0, t1 = sim.totals_initial["h"], sim.totals()["h"]
    assert abs(t1 - t0) <= 1e-12 * abs(t0)


@pytest.mark.parametrize("subcycle", [False, True])
def test_radial_dam_keeps_the_symmetries_of_the_square(radial_dam, subcycle):
    sim = radial_dam.setup(mx=8, t_final=0.4, min_level=2, max_level=4,
                           subcycle=subcycle).run()
    assert sim.subcycling == subcycle
    n = 8 * 2 ** sim.max_level
    (x0, y0), (x1, y1) = sim.domain.lower, sim.domain.upper
    xc = x0 + (np.arange(n) + 0.5) * (x1 - x0) / n
    yc = y0 + (np.arange(n) + 0.5) * (y1 - y0) / n
    X, Y = np.meshgrid(xc, yc)
    q = sim.sample(X.ravel(), Y.ravel()).reshape(n, n, -1)
    h, hu, hv = q[..., 0], q[..., 1], q[..., 2]
    tol = 1e-12 * np.abs(q).max()
    # reflections x -> -x, y -> -y and the diagonal swap generate all 8 symmetries
    assert np.abs(h - h[:, ::-1]).max() <= tol and np.abs(hu + hu[:, ::-1]).max() <= tol
    assert np.abs(h - h[::-1, :]).max() <= tol and np.abs(hv + hv[::-1, :]).max() <= tol
    assert np.abs(h - h.T).max() <= tol and np.abs(hu - hv.T).max() <= tol
    assert np.abs(h - h[::-1, ::-1].T).max() <= tol
    assert np.abs(h.max() - 1.0) > 0.05


def stoker(x, t, hl=2.0, hr=1.0, g=1.0):
    """Exact depth of the 1D dam break (wet on both sides) at ``x`` (dam at 0)."""
    cl = math.sqrt(g * hl)
    # middle state: 2 (cl - cm) = (hm - hr) sqrt(g (hm + hr) / (2 hm hr))
    lo, hi = hr, hl
    for _ in range(200):
        hm = 0.5 * (lo + hi)
        f = 2.0 * (cl - math.sqrt(g * hm)) - (hm - hr) * math.sqrt(g * (hm + hr) / (2 * hm * hr))
        lo, hi = (hm, hi) if f > 0 else (lo, hm)
    um = 2.0 * (cl - math.sqrt(g * hm))
    shock = hm * um / (hm - hr)
    cm = math.sqrt(g * hm)
    xi = x / t
    h = np.where(xi <= -cl, hl, np.where(
        xi <= um - cm, ((2 * cl - xi) / 3) ** 2 / g, np.where(xi <= shock, hm, hr)))
    return h


def test_a_one_dimensional_dam_break_agrees_with_the_global_step():
    """A dam break along x on an adaptive grid: the subcycled and the global-dt runs
    differ by much less than either differs from the exact solution."""

    def qinit(x, y):
        h = np.where(x < 0.0, 2.0, 1.0)
        return np.stack([h, 0 * x, 0 * x])

    def run(subcycle):
        return Simulation("shallow_roe", qinit=qinit, domain=Domain((-2, -0.5), (2, 0.5),
                                                                  ntrees=(4, 1)),
                          bc="extrap", mx=8, min_level=1, max_level=3, t_final=0.5,
                          params={"grav": 1.0}, refine_threshold=0.02,
                          subcycle=subcycle).run()

    sub, glob = run(True), run(False)
    assert sub.subcycling and len(sub.patches_per_level()) >= 2
    n = 4 * 8 * 2**3
    x = -2 + (np.arange(n) + 0.5) * 4 / n
    y = np.zeros(n) + 0.01
    exact = stoker(x, 0.5)
    hs, hg = sub.sample(x, y)[:, 0], glob.sample(x, y)[:, 0]
    dx = 4 / n
    err_sub, err_glob = np.abs(hs - exact).sum() * dx, np.abs(hg - exact).sum() * dx
    diff = np.abs(hs - hg).sum() * dx
    assert err_glob < 0.02 and err_sub < 1.25 * err_glob, (err_sub, err_glob)
    assert diff < 0.5 * err_glob, (diff, err_glob)


def test_a_rejected_coarse_step_leaves_the_state_and_forest_as_they_were(radial_dam):
    sim = radial_dam.setup(mx=8, min_level=2, max_level=4, t_final=0.3, regrid_interval=1)
    sim.run(max_steps=2)
    assert sim.subcycling
    q, forest, t, steps = sim.q.copy(), sim.forest, sim.t, sim.steps
    accepted, courant = sim.step(50 * sim.dt)
    assert not accepted and courant > sim.cfl_max
    assert sim.forest == forest and np.array_equal(sim.q, q)
    assert sim.t == t and sim.steps == steps
    sim.run()  # and the run goes on
    assert sim.t == pytest.approx(0.3)


def test_output_times_are_landed_on_by_every_level(radial_dam):
    times = []

    class Every:
        def next_time(self, sim):
            return 0.05 * (math.floor(sim.t / 0.05 + 1e-9) + 1)

        def on_step(self, sim):
            times.append(sim.t)

    sim = radial_dam.setup(mx=8, min_level=2, max_level=4, t_final=0.2)
    sim.callbacks.append(Every())
    sim.run()
    for k in (1, 2, 3, 4):
        assert min(abs(t - 0.05 * k) for t in times) < 1e-12


def test_split_sources_see_each_level_with_its_time_step():
    """``src2`` is called per level with that level's patches (``sim.hook_rows``) and
    ``dt``: each level's calls cover the run's time once; a linear decay ``q' = -q``
    applied by the hook then decays the total as exp(-t), up to the splitting error."""
    calls = []

    def src2(q, aux, x, y, t, dt):
        levels = set(sim.geom.level[sim.hook_rows].tolist())
        assert len(levels) == 1 and len(q) == len(sim.hook_rows)
        calls.append((levels.pop(), dt))
        q *= math.exp(-dt)

    def qinit(x, y):
        return np.stack([1.0 + 0.3 * np.exp(-40 * (x * x + y * y))])

    sim = Simulation("advection", qinit=qinit, domain=Domain((-1, -1), (1, 1),
                                                           periodic=(True, True)),
                     bc="periodic", mx=8, min_level=1, max_level=3, refine_threshold=0.01,
                     params={"u": 1.0, "v": 0.5}, regrid_interval=0, t_final=0.2, src2=src2)
    m0 = sim.totals()["q"]
    sim.run()
    assert sim.subcycling
    dts = sorted({round(dt, 15) for _, dt in calls})
    assert len(dts) >= 2  # each level its own dt
    for level in set(lv for lv, _ in calls):
        assert sum(dt for lv, dt in calls if lv == level) == pytest.approx(sim.t, rel=1e-12)
    assert sim.totals()["q"] == pytest.approx(m0 * math.exp(-sim.t), rel=1e-4)


def test_a_finer_level_in_slower_water_steps_with_its_coarser_level():
    """Variable time ratios (GeoClaw's): where the finer level's own Courant condition
    allows the coarser level's dt, it takes one step per coarse step, not two."""

    def qinit(x, y):  # deep (fast) water at x < -0.5, shallow (slow) water with a bump
        h = np.where(x < -0.5, 4.0, 0.05 + 0.02 * np.exp(-200 * ((x - 0.5) ** 2 + y * y)))
        return np.stack([h, 0 * x, 0 * x])

    def tag(q, aux, geom, t):  # refine the slow half only
        return geom.xlower >= 0.0

    sim = Simulation("shallow_roe", qinit=qinit, domain=Domain((-1, -1), (1, 1)), bc="wall",
                     mx=8, min_level=2, max_level=3, tag=tag, params={"grav": 1.0},
                     regrid_interval=0, t_final=0.15)
    sim.run()
    counts = sim.level_steps
    assert sorted(sim.patches_per_level()) == [2, 3]
    assert counts[2] >= 4 and counts[3] == counts[2] + 1  # ratio 2 for the first step only
    t0, t1 = sim.totals_initial["h"], sim.totals()["h"]
    assert abs(t1 - t0) <= 1e-12 * t0


def test_nan_in_a_subcycled_step_keeps_the_last_valid_state(radial_dam):
    """The level steps change the state in place: a NaN (here from a hook) is reported
    with the state of before the coarse step put back."""
    from forestpy import StateError

    sim = radial_dam.setup(mx=8, min_level=2, max_level=4, t_final=0.2)
    sim.run(max_steps=2)
    assert sim.subcycling
    good, forest = sim.q.copy(), sim.forest

    def poison(q, aux, x, y, t, dt):
        q[0, 0, 3, 3] = np.nan

    object.__setattr__(sim.vtable, "src2", poison)
    with pytest.raises(StateError, match="NaN"):
        sim.run()
    assert np.array_equal(sim.q, good) and sim.forest == forest and sim.steps == 2
