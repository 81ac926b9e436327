"""Regrid transfer (forestpy.patches.regrid): conservation, exactness, round trips."""

from __future__ import annotations

import numpy as np
import pytest
from forests import random_forest

from forestpy.forest import Brick, Forest
from forestpy.patches import (
    PatchGeometry,
    apply_physical_bc,
    build_ghost_plan,
    fill_ghosts,
    normalize_bc,
    transfer,
)

EPS = np.finfo(float).eps
MX, MY, MBC = 8, 6, 2
BRICKS = {
    "2x1": Brick(2, 1, lower=(-1.0, 0.0), upper=(1.0, 1.0)),
    "per_xy": Brick(2, 2, periodic_x=True, periodic_y=True),
}


def geom_of(f):
    return PatchGeometry.from_forest(f, MX, MY, MBC)


def interior(q):
    return q[:, :, MBC:-MBC, MBC:-MBC]


def totals(q, geom):
    """Per-field total: sum of interior q * dx * dy."""
    return np.einsum("pmji,p->m", interior(q), geom.dx * geom.dy)


def filled(f, geom, q, bc="extrap", centers=None):
    q = q.copy()
    fill_ghosts(build_ghost_plan(f, geom), q)
    per = (geom.periodic_x, geom.periodic_y)
    if isinstance(bc, str) and bc == "extrap":
        bc = tuple("periodic" if per[s // 2] else "extrap" for s in range(4))
    apply_physical_bc(q, geom, normalize_bc(bc, *per), reflect=((), ()), centers=centers)
    return q


def fields(geom, rng):
    """Smooth and discontinuous fields, positive so that totals are O(1)."""
    x, y = geom.cell_centers()
    smooth = 2.0 + np.sin(2 * np.pi * x) * np.cos(2 * np.pi * y)
    jump = np.where(x + 0.5 * y > 0.3, 3.0, 1.0) + 0.5 * rng.random(x.shape)
    noise = 1.0 + rng.random(x.shape)
    return np.stack([smooth, jump, noise], axis=1)


def refined(f, rng, frac=0.3):
    """A refinement of ``f`` by at most one level per leaf (random flags, balanced)."""
    g = f.refine(rng.random(f.n) < frac).balance()
    assert g != f
    return g


@pytest.mark.parametrize("brick", list(BRICKS))
def test_refine_keeps_totals(brick):
    rng = np.random.default_rng(1)
    f = random_forest(BRICKS[brick], rng, rounds=2)
    gf = geom_of(f)
    q = filled(f, gf, fields(gf, rng))
    g = refined(f, rng)
    gg = geom_of(g)
    qn = transfer(f, gf, q, g, gg)
    t0, t1 = totals(q, gf), totals(qn, gg)
    scale = np.einsum("pmji,p->m", np.abs(interior(q)), gf.dx * gf.dy)
    assert np.all(np.abs(t1 - t0) <= 1e-13 * scale), (t1 - t0) / scale
    # and coarsening back keeps them too
    qb = transfer(g, gg, filled(g, gg, qn), f, gf)
    assert np.all(np.abs(totals(qb, gf) - t0) <= 1e-13 * scale)


@pytest.mark.parametrize("brick", list(BRICKS))
def test_refine_then_coarsen_round_trip(brick):
    rng = np.random.default_rng(2)
    f = random_forest(BRICKS[brick], rng, rounds=2)
    gf = geom_of(f)
    q = filled(f, gf, fields(gf, rng))
    g = refined(f, rng, frac=0.5)
    gg = geom_of(g)
    back = transfer(g, gg, transfer(f, gf, q, g, gg), f, gf)
    # Not bitwise in general: a parent value qc becomes children qc + a and qc - a (a the
    # limited slope times 1/4, and likewise in y), and in floating point
    # ((qc + a) + (qc - a)) / 2 need not equal qc exactly because each sum is rounded.
    # A bound of the rounding: 2 roundings per child, 3 in the sum of four.
    err = np.abs(interior(back) - interior(q)).max()
    assert err <= 4 * EPS * np.abs(interior(q)).max()


@pytest.mark.parametrize("brick", list(BRICKS))
def test_round_trip_bitwise_for_piecewise_constant(brick):
    """Data constant on every coarse patch has zero limited slopes: children get the
    parent value exactly and their average is exact."""
    rng = np.random.default_rng(3)
    f = random_forest(BRICKS[brick], rng, rounds=2)
    gf = geom_of(f)
    per_leaf = 1.0 / 3.0 + rng.random((f.n, 2))
    q = filled(f, gf, np.broadcast_to(per_leaf[:, :, None, None], (f.n, 2) + gf.shape).copy())
    g = refined(f, rng, frac=0.5)
    gg = geom_of(g)
    fine = transfer(f, gf, q, g, gg)
    back = transfer(g, gg, fine, f, gf)
    assert np.array_equal(interior(back), interior(q))


def test_linear_data_interpolated_exactly():
    rng = np.random.default_rng(4)
    f = random_forest(BRICKS["2x1"], rng, rounds=2)
    gf = geom_of(f)

    def lin(x, y):
        return np.stack([0.7 * x - 1.9 * y + 0.25, -3.0 * x + 0.5 * y], axis=1)

    x, y = gf.cell_centers()
    # exact ghost values outside the domain too (a user boundary), so that the limited
    # slopes of the boundary cells see the linear function
    xall, yall = x, y

    def exact_bc(side, sub, aux, xs, ys, t):
        b = MBC
        v = lin(xs, ys)
        if side == 0:
            sub[..., :b] = v[..., :b]
        elif side == 1:
            sub[..., -b:] = v[..., -b:]
        elif side == 2:
            sub[..., :b, :] = v[..., :b, :]
        else:
            sub[..., -b:, :] = v[..., -b:, :]

    q = lin(x, y)
    ghost = np.ones(gf.shape, dtype=bool)
    ghost[MBC:-MBC, MBC:-MBC] = False
    q[:, :, ghost] = np.nan
    q = filled(f, gf, q, bc=exact_bc, centers=lambda i: (xall[i], yall[i]))
    assert not np.isnan(q).any()
    g = refined(f, rng, frac=0.5)
    gg = geom_of(g)
    qn = transfer(f, gf, q, g, gg)
    xn, yn = gg.cell_centers(ghosts=False)
    np.testing.assert_allclose(interior(qn), lin(xn, yn), rtol=0, atol=1e-13)


def test_unchanged_leaves_copied_bitwise():
    rng = np.random.default_rng(5)
    f = random_forest(BRICKS["2x1"], rng, rounds=2)
    gf = geom_of(f)
    q = filled(f, gf, rng.standard_normal((f.n, 2) + gf.shape))
    g = refined(f, rng)
    # coarsen a few families as well, so that all three cases occur
    g = g.coarsen(np.isin(g.level, [g.level.max()]) & (rng.random(g.n) < 0.9)).balance()
    gg = geom_of(g)
    qn = transfer(f, gf, q, g, gg)
    old = {(t, lv, x, y): i for i, (t, lv, x, y) in enumerate(zip(f.tree, f.level, f.x, f.y))}
    same = [(i, old[k]) for i, k in enumerate(zip(g.tree, g.level, g.x, g.y)) if k in old]
    assert 0 < len(same) < g.n
    new_i, old_i = np.array(same).T
    assert np.array_equal(interior(qn)[new_i], interior(q)[old_i])
    # every new patch comes back with its ghost cells zero (they are filled afterwards)
    ghost = np.ones(gg.shape, dtype=bool)
    ghost[MBC:-MBC, MBC:-MBC] = False
    assert np.all(qn[:, :, ghost] == 0.0)


def test_two_level_jump_raises():
    rng = np.random.default_rng(6)
    f = Forest.new(BRICKS["2x1"], 1)
    gf = geom_of(f)
    q = filled(f, gf, rng.standard_normal((f.n, 1) + gf.shape))
    g = f.refine(np.arange(f.n) == 0)
    g = g.refine(np.arange(g.n) == 0)  # leaf 0 of f refined twice
    assert g.level[0] == f.level[0] + 2
    gg = geom_of(g)
    with pytest.raises(ValueError, match="more than one level"):
        transfer(f, gf, q, g, gg)
    # and the other way round (coarsening by two levels)
    qg = rng.standard_normal((g.n, 1) + gg.shape)
    with pytest.raises(ValueError, match="more than one level"):
        transfer(g, gg, qg, f, gf)
