"""Tests for the radially symmetric shallow-water reference solver."""

import math

import numpy as np
import pytest
from forestpy.extensions.reference import (
    cell_centers,
    radial_mass,
    sample,
    solve_radial,
    solve_radial_dam,
)

G, H_IN, H_OUT, R0 = 1.0, 2.0, 1.0, 0.5


def _stoker(hl=H_IN, hr=H_OUT, g=G):
    """Planar wet-wet dam break: middle depth/velocity and shock speed."""
    brentq = pytest.importorskip("scipy.optimize").brentq

    def f(hm):
        return 2.0 * (math.sqrt(g * hl) - math.sqrt(g * hm)) - (hm - hr) * math.sqrt(
            0.5 * g * (hm + hr) / (hm * hr)
        )

    hm = brentq(f, hr, hl, xtol=1e-15)
    um = 2.0 * (math.sqrt(g * hl) - math.sqrt(g * hm))
    return hm, um, hm * um / (hm - hr)


def _coarsen(r, v):
    """Conservative (r-weighted) restriction of a 2N-cell field to N cells."""
    w = r * v
    return (w[0::2] + w[1::2]) / (r[0::2] + r[1::2])


def test_mass_conserved_dam_break():
    r0, h0, _ = solve_radial_dam(ncells=500, t_final=0.0)
    r, h, hu = solve_radial_dam(ncells=500, t_final=1.0)
    m0 = radial_mass(r0, h0)
    # exact initial mass: the step cell is initialised with its area fraction
    r_max = 2.5 * math.sqrt(2.0)
    exact = math.pi * (R0**2 * H_IN + (r_max**2 - R0**2) * H_OUT)
    assert m0 == pytest.approx(exact, rel=1e-14)
    assert abs(radial_mass(r, h) - m0) <= 1e-13 * m0
    assert np.all(np.isfinite(h)) and h.min() > 0.0


def test_mass_conserved_general_state():
    # compactly supported data, so that no signal reaches r_max = 3 by t = 0.8
    def h0(r):
        bump = np.cos(np.pi * (r - 0.6) / 0.6) ** 2
        return 1.0 + 0.5 * np.where(np.abs(r - 0.6) < 0.3, bump, 0.0)

    def u0(r):
        return np.where(r < 0.8, 0.3 * np.sin(np.pi * r / 0.8), 0.0)

    r, h_init, _ = solve_radial(h0, u0, r_max=3.0, ncells=300, t_final=0.0)
    r, h, hu = solve_radial(h0, u0, r_max=3.0, ncells=300, t_final=0.8, limiter="minmod")
    assert abs(radial_mass(r, h) - radial_mass(r, h_init)) <= 1e-13 * radial_mass(r, h_init)


def test_lake_at_rest():
    r, h, hu = solve_radial(lambda r: np.full_like(r, 1.5), ncells=400, t_final=1.0)
    assert np.max(np.abs(h - 1.5)) < 1e-13
    assert np.max(np.abs(hu)) < 1e-13


@pytest.mark.parametrize("limiter", ["mc", "minmod"])
def test_self_convergence(limiter):
    sols = {n: solve_radial_dam(ncells=n, t_final=1.0, limiter=limiter) for n in (200, 400, 800)}
    errs = []
    for n in (200, 400):
        r, h, _ = sols[n]
        r2, h2, _ = sols[2 * n]
        errs.append(np.sum(np.abs(h - _coarsen(r2, h2))) * (r[1] - r[0]))
    assert errs[0] / errs[1] > 1.5


def test_early_time_matches_planar_stoker():
    """Near the dam and at small t curvature is a small perturbation of Stoker."""
    hm, um, s = _stoker()
    c_in = math.sqrt(G * H_IN)
    r_max, n = 0.8, 4000
    dr = r_max / n
    devs = []
    for t in (0.01, 0.02):
        r, h, hu = solve_radial_dam(r_max=r_max, ncells=n, t_final=t)
        h_mid = float(sample(r, h, R0))
        devs.append(abs(h_mid - hm) / hm)
        assert devs[-1] < 0.02
        # geometric spreading lowers the radial middle state below the planar one
        assert h_mid < hm
        assert float(sample(r, hu, R0)) == pytest.approx(hm * um, rel=0.03)
        # shock: outermost cell above the mean of middle and outer depth
        r_shock = r[np.nonzero(h > 0.5 * (hm + H_OUT))[0].max()]
        assert abs(r_shock - (R0 + s * t)) < 3 * dr
        # rarefaction head: innermost disturbed cell
        r_head = r[np.nonzero(h < H_IN - 1e-3)[0].min()]
        assert abs(r_head - (R0 - c_in * t)) < 3 * dr
    # the curvature error is O(t): it shrinks as t -> 0
    assert devs[0] < devs[1]


def test_sample_and_grid():
    r = cell_centers(2.0, 4)
    np.testing.assert_allclose(r, [0.25, 0.75, 1.25, 1.75])
    v = 2.0 * r
    q = np.array([[0.5, 1.0], [1.5, 1.6]])
    out = sample(r, v, q)
    assert out.shape == q.shape
    np.testing.assert_allclose(out, 2.0 * q)
    assert sample(r, v, 0.0) == pytest.approx(0.5)  # held end value


def test_bad_arguments():
    with pytest.raises(ValueError):
        solve_radial_dam(ncells=50, limiter="superbee")
    with pytest.raises(ValueError):
        solve_radial_dam(radius=5.0)
    with pytest.raises(ValueError):
        solve_radial(lambda r: -np.ones_like(r), ncells=10)


@pytest.mark.slow
def test_full_resolution_quiet_boundary():
    """The full-resolution reference (its run time: ``reference_wall_s`` of
    benchmarks/radial_dam.py, not a test)."""
    r, h, hu = solve_radial_dam()  # 20000 cells to t = 1
    assert r.size == 20000 and h.min() > 0.0
    # no wave reaches r_max = 2.5*sqrt(2): the far field is still at rest
    far = r > 2.2
    assert np.max(np.abs(h[far] - H_OUT)) < 1e-12
    assert np.max(np.abs(hu[far])) < 1e-12
    # outgoing shock of the circular dam break lies inside r < 2
    r_shock = r[np.nonzero(h > H_OUT + 0.05)[0].max()]
    assert 1.4 < r_shock < 2.0
