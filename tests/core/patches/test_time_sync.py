"""Coarse-fine conservation fix (forestpy.patches.time_sync).

First against a fake kernel result and a linear flux, with the correction written out
independently for one coarse cell on each side; then end to end with the Clawpack
kernel: total mass is kept to round-off with the fix, and not without it.
"""

from __future__ import annotations

import numpy as np
import pytest
from forestpy.solvers.clawpack.solver import ClawpackSolver
from forests import refined_forest

from forestpy.forest import Brick, Forest
from forestpy.patches import (
    PatchGeometry,
    apply_physical_bc,
    apply_time_sync,
    build_ghost_plan,
    build_time_sync_plan,
    fill_ghosts,
    normalize_bc,
)
from forestpy.vtable import get_riemann

MX = MY = 8
MBC = 2


def two_level_forest(conn, seed, nrefine=4):
    return refined_forest(conn, seed, base=2, nrefine=nrefine)


# --------------------------------------------------------------------------------------
# fake kernel, linear flux
# --------------------------------------------------------------------------------------

MEQN = 2
A = np.array([[0.8, -0.3], [0.2, 1.1]])  # f(q) = A q (x-flux)
B = np.array([[-0.5, 0.4], [0.7, 0.3]])  # g(q) = B q (y-flux)


def linear_fluctuations(ixy, ql, qr, auxl, auxr, params, out):
    M = A if ixy == 1 else B
    out[:] = (qr - ql) @ M.T


def find_cell(geom, x, y):
    """(patch, padded j, padded i) of the interior cell containing the point (x, y)."""
    inside = (
        (geom.xlower <= x)
        & (x < geom.xlower + geom.mx * geom.dx)
        & (geom.ylower <= y)
        & (y < geom.ylower + geom.my * geom.dy)
    )
    (p,) = np.flatnonzero(inside)
    i = int(np.floor((x - geom.xlower[p]) / geom.dx[p]))
    j = int(np.floor((y - geom.ylower[p]) / geom.dy[p]))
    return p, j + geom.mbc, i + geom.mbc


def neighbour_cells(geom, p, j, i, side):
    """Interior cells across ``side`` of the cell (p, j, i), found by point location at
    a quarter of a cell beyond the face (two points: finds one or two cells)."""
    xc = geom.xlower[p] + (i - geom.mbc + 0.5) * geom.dx[p]
    yc = geom.ylower[p] + (j - geom.mbc + 0.5) * geom.dy[p]
    dx, dy = geom.dx[p], geom.dy[p]
    if side < 2:
        x = xc + (0.75 if side == 1 else -0.75) * dx
        pts = [(x, yc - 0.25 * dy), (x, yc + 0.25 * dy)]
    else:
        y = yc + (0.75 if side == 3 else -0.75) * dy
        pts = [(xc - 0.25 * dx, y), (xc + 0.25 * dx, y)]
    cells = []
    for px, py in pts:
        (x0, y0), (x1, y1) = geom.domain_lower, geom.domain_upper
        if not (x0 < px < x1 and y0 < py < y1):
            return []
        cells.append(find_cell(geom, px, py))
    return cells


def edge_index(geom, side, j, i):
    return (j if side < 2 else i) - geom.mbc


def fake_step(seed, mx, my):
    f = two_level_forest(Brick(), seed)
    geom = PatchGeometry.from_forest(f, mx, my, MBC)
    rng = np.random.default_rng(seed)
    n = geom.npatch
    q_old = rng.standard_normal((n, MEQN) + geom.shape)
    q_new = rng.standard_normal((n, MEQN) + geom.shape)
    edge = rng.standard_normal((n, 4, MEQN, max(mx, my)))
    return f, geom, q_old, q_new, edge


SIZES = [(8, 8), (8, 6), (4, 8)]


@pytest.mark.parametrize("mx,my", SIZES)
def test_only_coarse_cells_next_to_fine_patches_change(mx, my):
    f, geom, q_old, q_new, edge = fake_step(0, mx, my)
    plan = build_time_sync_plan(f, geom)
    assert len(plan) > 0
    q = q_new.copy()
    apply_time_sync(plan, q_old, q, None, edge, geom, 0.01, linear_fluctuations, None)
    changed = np.any(q != q_new, axis=1)

    expected = np.zeros_like(changed)
    b = geom.mbc
    for p in range(geom.npatch):
        for j in range(b, b + geom.my):
            for i in range(b, b + geom.mx):
                for side in range(4):
                    nb = neighbour_cells(geom, p, j, i, side)
                    if any(geom.level[c[0]] > geom.level[p] for c in nb):
                        expected[p, j, i] = True
    assert expected.sum() > 0
    assert np.array_equal(changed, expected)


@pytest.mark.parametrize("mx,my", SIZES)
@pytest.mark.parametrize("side", range(4))
def test_correction_matches_closed_form(side, mx, my):
    f, geom, q_old, q_new, edge = fake_step(1, mx, my)
    plan = build_time_sync_plan(f, geom)
    dt = 0.013
    q = q_new.copy()
    apply_time_sync(plan, q_old, q, None, edge, geom, dt, linear_fluctuations, None)

    # one coarse cell whose ``side`` face is a coarse-fine face, and only that one (a
    # corner cell could be corrected twice)
    b = geom.mbc
    target = None
    for p in range(geom.npatch):
        for j in range(b, b + geom.my):
            for i in range(b, b + geom.mx):
                finer = [
                    any(geom.level[c[0]] > geom.level[p] for c in neighbour_cells(geom, p, j, i, s))
                    for s in range(4)
                ]
                if finer[side] and sum(finer) == 1:
                    target = (p, j, i)
                    break
            if target:
                break
        if target:
            break
    assert target is not None
    p, j, i = target
    fine = neighbour_cells(geom, p, j, i, side)
    assert len(fine) == 2 and all(geom.level[c[0]] == geom.level[p] + 1 for c in fine)
    M = A if side < 2 else B
    width = geom.dx[p] if side < 2 else geom.dy[p]
    qC = q_old[p, :, j, i]
    opposite = {0: 1, 1: 0, 2: 3, 3: 2}[side]
    fine_flux = [
        edge[c[0], opposite, :, edge_index(geom, opposite, c[1], c[2])]
        + M @ (q_old[c[0], :, c[1], c[2]] - qC)
        for c in fine
    ]
    coarse_flux = edge[p, side, :, edge_index(geom, side, j, i)]
    # fine on the + side:  dq = -dt/dx [ 1/2 sum_k (fp_k + f(q_k) - f(q_C)) - fm_C ]
    # fine on the - side:  dq = +dt/dx [ 1/2 sum_k (fm_k + f(q_k) - f(q_C)) - fp_C ]
    sign = -1.0 if side in (1, 3) else 1.0
    dq = sign * dt / width * (0.5 * (fine_flux[0] + fine_flux[1]) - coarse_flux)
    np.testing.assert_allclose(q[p, :, j, i] - q_new[p, :, j, i], dq, rtol=1e-12, atol=1e-15)


def test_empty_plan_on_uniform_forest():
    f = Forest.new(Brick(), 2)
    geom = PatchGeometry.from_forest(f, MX, MY, MBC)
    plan = build_time_sync_plan(f, geom)
    assert len(plan) == 0
    q = np.ones((f.n, 1) + geom.shape)
    apply_time_sync(plan, q, q, None, np.zeros((f.n, 4, 1, MX)), geom, 0.1, None, None)
    assert np.all(q == 1.0)


def test_plan_of_some_patches_is_the_whole_plan_restricted():
    """``patches=``: exactly the whole plan's entries whose coarse patch is listed, in
    the same order (x-normal first, pairs adjacent, the widths of those pairs); a range
    (a rank's owned patches) is built from its own faces alone, another set by
    restricting the whole plan; the whole plan is the vectorised reference's."""
    from time_sync_reference import build_time_sync_plan_reference

    f = two_level_forest(Brick(2, 1, periodic_x=True), seed=5, nrefine=6)
    geom = PatchGeometry.from_forest(f, MX, MY, MBC)
    whole = build_time_sync_plan_reference(f, geom)
    fields = ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign", "width")
    odd = np.arange(1, f.n, 3)
    for sel in [np.arange(lo, hi) for lo, hi in ((0, f.n // 3), (f.n // 3, f.n), (5, 6),
                                                 (0, f.n))] + [odd]:
        part = build_time_sync_plan(f, geom, patches=sel)
        wanted = np.zeros(f.n, dtype=bool)
        wanted[sel] = True
        keep = wanted[whole.coarse[:, 0]]
        assert part.nx == int(keep[: whole.nx].sum())
        for k in fields:
            a, b = getattr(part, k), getattr(whole, k)[keep[::2] if k == "width" else keep]
            assert a.dtype == b.dtype and np.array_equal(a, b), k
    assert 0 < len(build_time_sync_plan(f, geom, patches=np.arange(f.n // 3))) < len(whole)
    assert 0 < len(build_time_sync_plan(f, geom, patches=odd)) < len(whole)


@pytest.mark.parametrize("conn", [Brick(), Brick(3, 2, periodic_y=True),
                                  Brick(2, 2, periodic_x=True, periodic_y=True)])
@pytest.mark.parametrize("mx,my", [(8, 8), (6, 4)])
def test_compiled_plan_equals_the_vectorised_one(conn, mx, my):
    """The whole plan built by the compiled per-face bodies (a ``prange`` loop here, the
    GPU's kernels there) is the vectorised build's (``time_sync_reference.py``: through
    ``Forest.face_neighbors``) entry for entry, across tree and periodic boundaries."""
    from forests import random_forest
    from time_sync_reference import build_time_sync_plan_reference

    for seed in (3, 4):
        f = random_forest(conn, seed)
        geom = PatchGeometry.from_forest(f, mx, my, MBC)
        plan = build_time_sync_plan(f, geom)
        want = build_time_sync_plan_reference(f, geom)
        assert len(plan) > 0 and plan.nx == want.nx
        for k in ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign", "width"):
            a, b = getattr(plan, k), getattr(want, k)
            assert a.dtype == b.dtype and np.array_equal(a, b), k


# --------------------------------------------------------------------------------------
# end to end with the Clawpack kernel
# --------------------------------------------------------------------------------------


def run_steps(solver, riemann, f, q, bc, nsteps, sync):
    geom = PatchGeometry.from_forest(f, MX, MY, MBC)
    ghosts = build_ghost_plan(f, geom)
    plan = build_time_sync_plan(f, geom)
    assert len(plan) > 0
    aux = np.zeros((geom.npatch, 0) + geom.shape)
    dt = 0.4 * geom.dx.min()
    for _ in range(nsteps):
        fill_ghosts(ghosts, q)
        apply_physical_bc(q, geom, bc, riemann.wall_reflect)
        q_new, cfl, edge = solver.step(q, aux, geom, dt)
        assert 0.0 < cfl.max() < 1.0
        if sync:
            apply_time_sync(plan, q, q_new, aux, edge, geom, dt, solver.fluctuations, solver.params)
        q = q_new
    return q


def mass(q, geom):
    b = geom.mbc
    return float(np.einsum("pji,p->", q[:, 0, b:-b, b:-b], geom.dx * geom.dy))


def test_advection_periodic_conserves_mass():
    riemann = get_riemann("advection")
    solver = ClawpackSolver(riemann, order=2, transverse_waves=2, limiter="mc")
    conn = Brick(periodic_x=True, periodic_y=True)
    f = two_level_forest(conn, seed=3)
    geom = PatchGeometry.from_forest(f, MX, MY, MBC)
    rng = np.random.default_rng(3)
    x, y = geom.cell_centers()
    phase = rng.random(2) * 2 * np.pi
    q0 = (1.5 + np.sin(2 * np.pi * x + phase[0]) * np.cos(2 * np.pi * y + phase[1]))[:, None]
    bc = normalize_bc("periodic", True, True)
    m0 = mass(q0, geom)
    q = run_steps(solver, riemann, f, q0.copy(), bc, 5, sync=True)
    assert abs(mass(q, geom) - m0) <= 1e-13 * abs(m0)
    # without the fix, mass is lost or gained at the coarse-fine faces
    q = run_steps(solver, riemann, f, q0.copy(), bc, 5, sync=False)
    assert abs(mass(q, geom) - m0) > 1e-10 * abs(m0)


def test_shallow_water_walls_conserves_mass():
    riemann = get_riemann("shallow_roe")
    solver = ClawpackSolver(riemann, order=2, transverse_waves=2, limiter="mc")
    solver.set_params(riemann.params_array({"grav": 1.0}))
    f = two_level_forest(Brick(), seed=4)
    geom = PatchGeometry.from_forest(f, MX, MY, MBC)
    rng = np.random.default_rng(4)
    x, y = geom.cell_centers()
    cx, cy = 0.3 + 0.4 * rng.random(2)
    h = 1.0 + 0.3 * np.exp(-40.0 * ((x - cx) ** 2 + (y - cy) ** 2))
    q0 = np.stack([h, 0.1 * h, -0.05 * h], axis=1)
    bc = normalize_bc("wall", False, False)
    m0 = mass(q0, geom)
    q = run_steps(solver, riemann, f, q0.copy(), bc, 5, sync=True)
    assert abs(mass(q, geom) - m0) <= 1e-13 * abs(m0)
    q = run_steps(solver, riemann, f, q0.copy(), bc, 5, sync=False)
    assert abs(mass(q, geom) - m0) > 1e-10 * abs(m0)
