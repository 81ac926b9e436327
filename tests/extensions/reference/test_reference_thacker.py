"""Thacker's planar solution (forestpy.extensions.reference.thacker) and its demo."""

import math

import numpy as np
import pytest
from forestpy.extensions.reference.thacker import ThackerPlanar
from testsupport import load_demo


def test_planar_solution_solves_the_shallow_water_equations():
    """Finite-difference residuals of mass and momentum (with the bottom source) vanish
    where the water is wet; the volume is that of the paraboloid's cap, pi h0 a^2 / 2."""
    ex = ThackerPlanar(a=1.0, h0=0.1, eta=0.5)
    g, e = ex.grav, 1e-5
    x, y = np.meshgrid(np.linspace(-0.4, 0.9, 9), np.linspace(-0.7, 0.6, 9))

    def h(x, y, t):  # the depth where wet (no clipping, for differences)
        return ex.surface(x, y, t) - ex.bottom(x, y)

    for t in (0.3, 1.7):
        wet = ex.depth(x, y, t) > 0.01
        xs, ys = x[wet], y[wet]
        u, v = ex.velocity(t)
        h_t = (h(xs, ys, t + e) - h(xs, ys, t - e)) / (2 * e)
        h_x = (h(xs + e, ys, t) - h(xs - e, ys, t)) / (2 * e)
        h_y = (h(xs, ys + e, t) - h(xs, ys - e, t)) / (2 * e)
        assert np.abs(h_t + u * h_x + v * h_y).max() < 1e-8  # u, v uniform in space
        u_t = (ex.velocity(t + e)[0] - ex.velocity(t - e)[0]) / (2 * e)
        v_t = (ex.velocity(t + e)[1] - ex.velocity(t - e)[1]) / (2 * e)
        w_x = (ex.surface(xs + e, ys, t) - ex.surface(xs - e, ys, t)) / (2 * e)
        w_y = (ex.surface(xs, ys + e, t) - ex.surface(xs, ys - e, t)) / (2 * e)
        assert np.abs(u_t + g * w_x).max() < 1e-7 and np.abs(v_t + g * w_y).max() < 1e-7
    n, L = 400, 2.0
    d = 2 * L / n
    c = -L + (np.arange(n) + 0.5) * d
    X, Y = np.meshgrid(c, c)
    vol = ex.cell_average_depth(X, Y, d, d, 0.9).sum() * d * d
    assert vol == pytest.approx(math.pi * ex.h0 * ex.a**2 / 2, rel=1e-5)


def test_cell_averages_match_a_fine_midpoint_rule():
    ex = ThackerPlanar()
    n, d = 32, 0.125
    c = -2 + (np.arange(n) + 0.5) * d
    X, Y = np.meshgrid(c, c)
    fine = np.zeros_like(X)
    m = 40
    offs = (np.arange(m) + 0.5) / m - 0.5
    for ox in offs:
        for oy in offs:
            fine += ex.depth(X + ox * d, Y + oy * d, 1.1)
    assert np.abs(ex.cell_average_depth(X, Y, d, d, 1.1) - fine / m**2).max() < 2e-5


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="eta < a"):
        ThackerPlanar(a=1.0, eta=1.0)
    demo = load_demo("geoclaw/thacker_planar")
    with pytest.raises(ValueError, match="reach the walls"):
        demo.setup(eta=1.2)
