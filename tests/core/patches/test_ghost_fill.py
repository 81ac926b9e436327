"""Ghost filling (forestpy.patches.ghost_plan) and physical boundaries (boundary).

References are direct evaluation: every in-domain ghost cell of a globally linear field
must come out exact (copy, 2 x 2 average and limited-linear interpolation all reproduce
linear data), constants stay bitwise constant, and boundary conditions are checked
against their index-level definition.
"""

from __future__ import annotations

import forests
import numpy as np
import pytest
from forests import interior_mask

from forestpy.forest import Brick, Forest
from forestpy.patches import (
    PatchGeometry,
    apply_physical_bc,
    build_ghost_plan,
    fill_ghosts,
    normalize_bc,
)

BRICKS = {
    "1x1": Brick(),
    "3x2": Brick(3, 2, lower=(-1.0, 0.5), upper=(2.0, 2.5)),
    "per_x": Brick(2, 2, periodic_x=True, upper=(2.0, 1.5)),
    "per_y": Brick(2, 3, periodic_y=True),
    "per_xy": Brick(2, 2, periodic_x=True, periodic_y=True),
}
SIZES = [(8, 8, 2), (8, 6, 2), (4, 4, 2), (8, 8, 3)]


def random_forest(conn, seed, base=1, rounds=3, frac=0.3):
    """A random 2:1-balanced forest of at least two levels (forests.random_forest)."""
    f = forests.random_forest(conn, seed, base, rounds, frac)
    assert f.is_balanced() and len(np.unique(f.level)) >= 2
    return f


def in_domain_mask(geom):
    """(npatch, NY, NX): cell centre inside the domain (any position in periodic dirs)."""
    xc, yc = geom.cell_centers()
    (x0, y0), (x1, y1) = geom.domain_lower, geom.domain_upper
    inx = np.ones_like(xc, dtype=bool) if geom.periodic_x else (xc > x0) & (xc < x1)
    iny = np.ones_like(yc, dtype=bool) if geom.periodic_y else (yc > y0) & (yc < y1)
    return inx & iny


def setup(brick, mx, my, mbc, seed=0):
    conn = BRICKS[brick]
    f = random_forest(conn, seed)
    geom = PatchGeometry.from_forest(f, mx, my, mbc)
    return f, geom, build_ghost_plan(f, geom)


# --------------------------------------------------------------------------------------
# exactness on linear and constant fields
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mx,my,mbc", SIZES)
@pytest.mark.parametrize("brick", list(BRICKS))
def test_linear_field_exact_in_domain(brick, mx, my, mbc):
    seed = 10 * list(BRICKS).index(brick) + SIZES.index((mx, my, mbc))
    f, geom, plan = setup(brick, mx, my, mbc, seed=seed)
    c = plan.counts
    assert c["copy"] > 0 and c["average"] > 0 and c["interpolate"] > 0
    xc, yc = geom.cell_centers()
    # linear in non-periodic directions, constant in periodic ones (a linear function
    # is not periodic)
    a = 0.0 if geom.periodic_x else 1.3
    b = 0.0 if geom.periodic_y else -0.7
    exact = np.stack([a * xc + b * yc + 0.4, -2.0 * a * xc + 3.0 * b * yc - 1.1], axis=1)
    inner = interior_mask(geom)
    q = exact.copy()
    q[:, :, ~inner] = np.nan
    before = q.copy()
    fill_ghosts(plan, q)

    # interior untouched, bitwise
    assert np.array_equal(q[:, :, inner], before[:, :, inner])
    ghost_in = in_domain_mask(geom) & ~inner
    g = np.broadcast_to(ghost_in[:, None], q.shape)
    assert not np.isnan(q[g]).any(), "an in-domain ghost cell was not filled"
    np.testing.assert_allclose(q[g], exact[g], rtol=0, atol=1e-13)
    # ghost cells outside the domain are left to the physical boundary conditions
    out = np.broadcast_to((~in_domain_mask(geom))[:, None], q.shape)
    assert np.isnan(q[out]).all()


@pytest.mark.parametrize("mx,my,mbc", [(8, 6, 2), (8, 8, 3)])
@pytest.mark.parametrize("brick", list(BRICKS))
def test_constant_field_stays_exactly_constant(brick, mx, my, mbc):
    f, geom, plan = setup(brick, mx, my, mbc, seed=7)
    value = 0.1 + 1.0 / 3.0  # not a dyadic number: averages of it are still exact
    q = np.full((geom.npatch, 2) + geom.shape, np.nan)
    inner = interior_mask(geom)
    q[:, :, inner] = value
    fill_ghosts(plan, q)
    ghost_in = np.broadcast_to((in_domain_mask(geom) & ~inner)[:, None], q.shape)
    assert np.all(q[ghost_in] == value)
    # then the physical boundaries: extrap on x, wall on y; component 0 is not reflected
    bc = normalize_bc(
        (
            "periodic" if geom.periodic_x else "extrap",
            "periodic" if geom.periodic_x else "wall",
            "periodic" if geom.periodic_y else "wall",
            "periodic" if geom.periodic_y else "extrap",
        ),
        geom.periodic_x,
        geom.periodic_y,
    )
    apply_physical_bc(q, geom, bc, reflect=((1,), (1,)))
    assert np.all(q[:, 0] == value)
    assert np.all(np.abs(q[:, 1]) == value)


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_ghost_values_within_interior_range(seed):
    """Copies, averages and minmod-limited interpolation never overshoot: random data
    in [0, 1) gives ghost values in [min, max] of the interiors.  (An unlimited slope
    would give e.g. 0.9 + (0.9 - 0.0)/4 > 1.)  Fully periodic, because next to a
    physical boundary the slope is one-sided and unlimited by design, so that linear
    fields stay exact there."""
    f, geom, plan = setup("per_xy", 8, 8, 2, seed=seed)
    rng = np.random.default_rng(seed)
    q = rng.random((geom.npatch, 2) + geom.shape)
    inner = interior_mask(geom)
    lo, hi = q[:, :, inner].min(), q[:, :, inner].max()
    fill_ghosts(plan, q)
    g = np.broadcast_to((in_domain_mask(geom) & ~inner)[:, None], q.shape)
    assert lo <= q[g].min() and q[g].max() <= hi


@pytest.mark.parametrize("brick", ["1x1", "3x2"])
def test_positive_components_stay_non_negative_next_to_boundaries(brick):
    """Next to a physical boundary the interpolation slope is one-sided and unlimited;
    for components declared positive (a depth) the fill never creates a negative value
    from non-negative data, while other components are left as computed."""
    found_negative = False
    for seed in range(6):
        f, geom, plan = setup(brick, 8, 8, 2, seed=seed)
        rng = np.random.default_rng(seed)
        data = rng.random((geom.npatch, 1) + geom.shape) ** 4
        q = np.concatenate([data, data], axis=1)
        fill_ghosts(plan, q, positive=(0,))
        g = np.broadcast_to(in_domain_mask(geom) & ~interior_mask(geom), q.shape[:1] + geom.shape)
        assert q[:, 0][g].min() >= 0.0
        found_negative |= q[:, 1][g].min() < 0.0
    assert found_negative  # the unclipped copy does overshoot: the clip is what helps


@pytest.mark.parametrize("brick", ["per_x", "per_y", "per_xy"])
def test_periodic_uniform_forest_wraps(brick):
    """Uniform periodic forest: every ghost is a copy of the periodic image."""
    conn = BRICKS[brick]
    f = Forest.new(conn, 2)
    geom = PatchGeometry.from_forest(f, 8, 6, 2)
    plan = build_ghost_plan(f, geom)
    xc, yc = geom.cell_centers()
    (x0, y0), (x1, y1) = geom.domain_lower, geom.domain_upper
    kx = 2 * np.pi / (x1 - x0) if geom.periodic_x else 0.9
    ky = 2 * np.pi / (y1 - y0) if geom.periodic_y else 1.1
    exact = (np.sin(kx * xc + 0.3) + np.cos(ky * yc - 0.2))[:, None]
    inner = interior_mask(geom)
    q = exact.copy()
    q[:, :, ~inner] = np.nan
    fill_ghosts(plan, q)
    g = np.broadcast_to((in_domain_mask(geom) & ~inner)[:, None], q.shape)
    np.testing.assert_allclose(q[g], exact[g], rtol=0, atol=1e-12)


@pytest.mark.parametrize("brick", list(BRICKS))
def test_same_level_neighbours_see_bitwise_copies(brick):
    f, geom, plan = setup(brick, 8, 6, 2, seed=11)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((geom.npatch, 3) + geom.shape)
    fill_ghosts(plan, q)
    nb = f.face_neighbors()
    mx, my, b = geom.mx, geom.my, geom.mbc
    rows, cols = slice(b, b + my), slice(b, b + mx)
    npairs = 0
    for face in range(4):
        for p in np.flatnonzero(nb.kind[:, face] == 0):
            n = nb.index[p, face, 0]
            if face == 0:
                ghost, edge = q[p, :, rows, :b], q[n, :, rows, mx : mx + b]
            elif face == 1:
                ghost, edge = q[p, :, rows, b + mx :], q[n, :, rows, b : 2 * b]
            elif face == 2:
                ghost, edge = q[p, :, :b, cols], q[n, :, my : my + b, cols]
            else:
                ghost, edge = q[p, :, b + my :, cols], q[n, :, b : 2 * b, cols]
            assert np.array_equal(ghost, edge), (p, face, n)
            npairs += 1
    assert npairs > 0


# --------------------------------------------------------------------------------------
# plan structure and errors
# --------------------------------------------------------------------------------------


def n_in_domain_ghosts(geom):
    return int((in_domain_mask(geom) & ~interior_mask(geom)).sum())


@pytest.mark.parametrize("mx,my,mbc", [(8, 8, 2), (6, 4, 1), (8, 8, 4)])
@pytest.mark.parametrize("brick", list(BRICKS))
def test_plan_equals_the_numpy_reference_builder(brick, mx, my, mbc):
    """The compiled builder gives the NumPy reference's plan entry for entry (same
    order and shapes; the reference's 4 source cells of an average as one block),
    periodic and multi-tree bricks included."""
    from ghost_plan_reference import build_ghost_plan_reference

    def blocks(cells):
        """The reference's 4 cells (..., 4, 3) of an average as a block (..., 4): the
        first cell and the step to the others (0: one cell four times)."""
        step = cells[..., 3, 1] - cells[..., 0, 1]
        assert np.array_equal(cells[..., 3, 2] - cells[..., 0, 2], step)
        return np.concatenate([cells[..., 0, :], step[..., None]], axis=-1)

    for seed in (31, 32):
        forest = random_forest(BRICKS[brick], seed)
        geom = PatchGeometry.from_forest(forest, mx, my, mbc)
        ref, plan = build_ghost_plan_reference(forest, geom), build_ghost_plan(forest, geom)
        ref.avg_src, ref.interp_nbr = blocks(ref.avg_src), blocks(ref.interp_nbr)
        assert np.all(ref.avg_src[:, 3] == 1)
        for name in ref.__dataclass_fields__:
            a, b = getattr(ref, name), getattr(plan, name)
            # the compiled builder stores indices as int32 (the reference: int64)
            assert b.dtype == (np.int32 if a.dtype == np.int64 else a.dtype), name
            assert a.shape == b.shape, name
            assert np.array_equal(a, b), name


@pytest.mark.parametrize("brick", ["3x2", "per_xy"])
def test_plan_of_some_patches_is_the_whole_plan_restricted(brick):
    """``build_ghost_plan(..., patches=ids)`` (a rank's owned range, or any increasing
    subset) gives exactly the whole plan's entries whose destination is in ``ids``."""
    forest = random_forest(BRICKS[brick], 41)
    geom = PatchGeometry.from_forest(forest, 8, 6, 2)
    whole = build_ghost_plan(forest, geom)
    rng = np.random.default_rng(42)
    for ids in (np.arange(forest.n // 3, 2 * forest.n // 3),
                np.flatnonzero(rng.random(forest.n) < 0.4), np.arange(0)):
        part = build_ghost_plan(forest, geom, patches=ids)
        for name in whole.__dataclass_fields__:
            kind = name.split("_")[0]
            keep = np.isin(getattr(whole, f"{kind}_dst")[:, 0], ids)
            assert np.array_equal(getattr(part, name), getattr(whole, name)[keep]), name


def test_plan_counts_uniform_only_copies():
    for conn in (Brick(2, 1, upper=(2.0, 1.0)), Brick(2, 2, periodic_x=True, periodic_y=True)):
        f = Forest.new(conn, 2)
        geom = PatchGeometry.from_forest(f, 8, 6, 2)
        c = build_ghost_plan(f, geom).counts
        assert c["average"] == 0 and c["interpolate"] == 0
        assert c["copy"] == n_in_domain_ghosts(geom)
    # fully periodic: every ghost cell of every patch is inside the domain
    assert c["copy"] == geom.npatch * ((8 + 4) * (6 + 4) - 8 * 6)


def test_plan_counts_one_refined_leaf():
    f = Forest.new(Brick(), 2)
    flags = np.zeros(f.n, dtype=bool)
    flags[5] = True
    f = f.refine(flags)
    assert f.is_balanced()
    geom = PatchGeometry.from_forest(f, 8, 8, 2)
    c = build_ghost_plan(f, geom).counts
    assert c["average"] > 0 and c["interpolate"] > 0
    assert c["copy"] + c["average"] + c["interpolate"] == n_in_domain_ghosts(geom)


def test_unbalanced_forest_raises():
    f = Forest.new(Brick(), 1)
    f = f.refine(np.arange(f.n) == 0)  # leaf 0 -> 4 children at level 2
    # child 1 (x = 1/4, y = 0) touches the level-1 leaf on its +x side
    f = f.refine(np.arange(f.n) == 1)
    assert not f.is_balanced()
    geom = PatchGeometry.from_forest(f, 8, 8, 2)
    with pytest.raises(ValueError, match="balanced"):
        build_ghost_plan(f, geom)


# --------------------------------------------------------------------------------------
# physical boundary conditions
# --------------------------------------------------------------------------------------


def bc_setup(seed=3):
    f = Forest.new(Brick(), 1)
    geom = PatchGeometry.from_forest(f, 6, 4, 2)
    q = np.random.default_rng(seed).standard_normal((geom.npatch, 3) + geom.shape)
    return geom, q


def side_ghost_and_mirror(geom, side):
    """Column/row indices of the ghost layers of ``side``, their mirrors and edge cell."""
    b, mx, my = geom.mbc, geom.mx, geom.my
    g = np.arange(b)
    if side == 0:
        return b - 1 - g, b + g, b
    if side == 1:
        return b + mx + g, b + mx - 1 - g, b + mx - 1
    if side == 2:
        return b - 1 - g, b + g, b
    return b + my + g, b + my - 1 - g, b + my - 1


def take(q, side, idx):
    """q[..., idx] along the axis normal to ``side``."""
    return q[..., idx] if side < 2 else q[..., idx, :]


@pytest.mark.parametrize("side", range(4))
def test_wall_mirrors_and_negates(side):
    geom, q = bc_setup()
    q0 = q.copy()
    bc = ["periodic"] * 4  # 'periodic' sides are skipped: only ``side`` is touched
    bc[side] = "wall"
    reflect = ((1,), (2,))
    apply_physical_bc(q, geom, bc, reflect)
    on = geom.on_side(side)
    assert len(on) == 2
    ghost, mirror, _ = side_ghost_and_mirror(geom, side)
    neg = reflect[0] if side < 2 else reflect[1]
    sign = np.array([-1.0 if m in neg else 1.0 for m in range(3)])[:, None, None]
    for p in on:
        assert np.array_equal(take(q[p], side, ghost), sign * take(q0[p], side, mirror))
    # nothing else changes
    changed = np.zeros(q.shape, dtype=bool)
    for p in on:
        if side < 2:
            changed[p, :, :, ghost] = True
        else:
            changed[p, :, ghost, :] = True
    assert np.array_equal(q[~changed], q0[~changed])


@pytest.mark.parametrize("side", range(4))
def test_extrap_copies_edge_cell(side):
    geom, q = bc_setup()
    q0 = q.copy()
    bc = ["periodic"] * 4
    bc[side] = "extrap"
    apply_physical_bc(q, geom, bc, reflect=((1,), (2,)))
    ghost, _, edge = side_ghost_and_mirror(geom, side)
    for p in geom.on_side(side):
        e = take(q0[p], side, [edge])
        for k in ghost:
            assert np.array_equal(take(q[p], side, [k]), e)
    others = np.setdiff1d(np.arange(geom.npatch), geom.on_side(side))
    assert np.array_equal(q[others], q0[others])


def test_corners_take_y_side_clawpack_order():
    geom, q = bc_setup()

    def fill_x(side, sub, aux, x, y, t):
        ghost, _, _ = side_ghost_and_mirror(geom, side)
        sub[..., ghost] = 5.0

    def fill_y(side, sub, aux, x, y, t):
        ghost, _, _ = side_ghost_and_mirror(geom, side)
        sub[..., ghost, :] = 7.0

    apply_physical_bc(q, geom, (fill_x, fill_x, fill_y, fill_y), reflect=((), ()))
    b, mx, my = geom.mbc, geom.mx, geom.my
    for p in range(geom.npatch):
        on = [p in geom.on_side(s) for s in range(4)]
        cols = slice(0, b) if on[0] else slice(b + mx, None)
        rows = slice(0, b) if on[2] else slice(b + my, None)
        assert np.all(q[p, :, rows, cols] == 7.0)  # corner outside both sides: y side
        assert np.all(q[p, :, b : b + my, cols] == 5.0)  # x ghost cells of interior rows
        assert np.all(q[p, :, rows, b : b + mx] == 7.0)


def test_user_callable_fills_its_side():
    geom, q = bc_setup()
    q0 = q.copy()
    xc, yc = geom.cell_centers()
    calls = []

    def user(side, sub, aux, x, y, t):
        calls.append(side)
        assert t == 2.5 and aux is None
        idx = geom.on_side(side)
        assert sub.shape == (len(idx), 3) + geom.shape
        assert np.array_equal(x, xc[idx]) and np.array_equal(y, yc[idx])
        ghost, _, _ = side_ghost_and_mirror(geom, side)
        if side < 2:
            sub[..., ghost] = 100.0 + side
        else:
            sub[..., ghost, :] = 100.0 + side
        b = geom.mbc
        sub[:, :, b:-b, b:-b] = -1.0  # scribbles on the interior are not copied back

    apply_physical_bc(
        q, geom, (user,) * 4, reflect=((1,), (2,)), t=2.5, centers=lambda i: (xc[i], yc[i])
    )
    assert calls == [0, 1, 2, 3]
    b, my = geom.mbc, geom.my
    inner = interior_mask(geom)
    assert np.array_equal(q[:, :, inner], q0[:, :, inner])
    for side in range(4):
        ghost, _, _ = side_ghost_and_mirror(geom, side)
        for p in geom.on_side(side):
            if side < 2:
                assert np.all(q[p][:, b : b + my][..., ghost] == 100.0 + side)
            else:
                assert np.all(q[p][:, ghost, :] == 100.0 + side)


def test_normalize_bc_accepts_forms():
    assert normalize_bc("wall", False, False) == ("wall",) * 4
    assert normalize_bc(
        {"x_lower": "wall", "y_upper": "periodic", "y_lower": "periodic"}, False, True
    ) == ("wall", "extrap", "periodic", "periodic")
    fn = lambda *a: None  # noqa: E731
    assert normalize_bc([fn, "extrap", "periodic", "periodic"], False, True)[0] is fn


@pytest.mark.parametrize(
    "bc,px,py,match",
    [
        (("wall", "outflow", "wall", "wall"), False, False, "x_upper"),
        ("reflect", False, False, "x_lower"),
        (("wall", "wall", "wall"), False, False, "4 entries"),
        (("wall",) * 5, False, False, "4 entries"),
        (("wall", "wall", "periodic", "periodic"), False, False, "y_lower"),
        (("periodic", "periodic", "wall", "wall"), False, True, "x_lower"),
        (("periodic", "periodic", "periodic", "extrap"), True, True, "y_upper"),
        (("periodic", "wall", "periodic", "periodic"), True, True, "x_upper"),
        ({"y_upper": "wall", "top": "wall"}, False, False, "top"),
        ((lambda *a: None, "periodic", "wall", "wall"), True, False, "x_lower"),
    ],
)
def test_normalize_bc_rejects(bc, px, py, match):
    with pytest.raises(ValueError, match=match):
        normalize_bc(bc, px, py)
