"""Pointwise hooks (forestpy.hooks): a source term and an inflow boundary written here,
as plain Python of one cell, with no CuPy or CUDA code, run on the CPU backend and on
the GPU backend (Numba's CUDA simulator without a GPU: tiny cases) and agree; the
compiled source gives the array-level hook's result; the launcher's per-patch
reduction against a NumPy reference.
"""

from __future__ import annotations

import functools
import math
import operator

import numba
import numpy as np
import pytest

from forestpy import Domain, Simulation
from forestpy.hooks import HookContext, pointwise_boundary, pointwise_source
from forestpy.patches.launch import PatchReduction, for_each_cell, for_each_patch

if not numba.config.ENABLE_CUDASIM:
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no GPU and the CUDA simulator is off", allow_module_level=True)


# ------------------------------------------------------------------ user hooks
def drag_and_rain(q, aux, x, y, t, dt, params):
    """Linear drag on the momenta and a steady rain falling on a disc."""
    damp = 1.0 / (1.0 + params[0] * dt)
    q[1] *= damp
    q[2] *= damp
    r2 = (x - 0.6) ** 2 + (y - 0.4) ** 2
    q[0] += dt * params[1] * math.exp(-20.0 * r2)


def drag_and_rain_arrays(mbc, params):
    """The same source as an array-level ``src2(q, aux, x, y, t, dt)``."""

    def src2(q, aux, x, y, t, dt):
        b = mbc
        damp = 1.0 / (1.0 + params[0] * dt)
        q[:, 1, b:-b, b:-b] *= damp
        q[:, 2, b:-b, b:-b] *= damp
        r2 = (x[:, b:-b, b:-b] - 0.6) ** 2 + (y[:, b:-b, b:-b] - 0.4) ** 2
        q[:, 0, b:-b, b:-b] += dt * params[1] * np.exp(-20.0 * r2)

    return src2


def inflow(side, q, q_in, aux, x, y, t, params, v):
    """A depth and a normal discharge pulsing in time, the tangential momentum of the
    mirror cell inside."""
    q[0] = params[0]
    q[1] = params[0] * params[1] * (1.0 + v * math.sin(6.0 * y))
    q[2] = q_in[2]


def still(x, y):
    h = 1.0 + 0.2 * np.exp(-40.0 * ((x - 0.4) ** 2 + (y - 0.5) ** 2))
    return np.stack([h, 0.1 * h, -0.05 * h])


def simulation(backend, src2, bc, **kw):
    opts = dict(domain=Domain((0, 0), (1, 1)), mx=4, min_level=1, max_level=1,
                t_final=0.3, params={"grav": 1.0}, backend=backend)
    opts.update(kw)
    return Simulation("shallow_roe", qinit=still, src2=src2, bc=bc, **opts)


def pointwise_case(backend, **kw):
    src = pointwise_source(drag_and_rain, params=[3.0, 0.5])
    wall = pointwise_boundary(inflow, params=[1.1, 0.3], value=lambda t: 0.5 + t)
    return simulation(backend, src, (wall, "extrap", "wall", "wall"), **kw)


def interior(sim):
    b = sim.mbc
    return sim.backend.to_host(sim.q)[:, :, b:-b, b:-b]


@pytest.mark.slow  # CUDA-simulator run; CI's slow step
def test_user_source_and_inflow_agree_on_both_backends():
    cpu = pointwise_case("cpu").run()
    gpu = pointwise_case("gpu").run()
    assert cpu.steps == gpu.steps > 2
    qc, qg = interior(cpu), interior(gpu)
    assert np.abs(qg - qc).max() <= 1e-13 * np.abs(qc).max()
    # the hooks acted: rain added water, the inflow pushed some in
    assert cpu.totals()["h"] > cpu.totals_initial["h"] + 1e-4


def test_compiled_source_equals_the_array_level_hook():
    """Same run with the pointwise source and with the array-level src2 (CPU): equal
    to round-off (exp of Numba and of NumPy may differ in the last bit)."""
    a = pointwise_case("cpu").run()
    wall = pointwise_boundary(inflow, params=[1.1, 0.3], value=lambda t: 0.5 + t)
    b = simulation("cpu", drag_and_rain_arrays(2, [3.0, 0.5]),
                   (wall, "extrap", "wall", "wall")).run()
    assert a.steps == b.steps
    qa, qb = interior(a), interior(b)
    assert np.abs(qa - qb).max() <= 1e-14 * np.abs(qb).max()
    assert not np.array_equal(qa, interior(simulation("cpu", None, "wall").run()))


def test_pointwise_boundary_equals_the_array_level_callable():
    def inflow_arrays(side, q, aux, x, y, t):
        assert side == 0
        v = 0.5 + t
        q[:, 0, :, :2] = 1.1
        q[:, 1, :, :2] = 1.1 * 0.3 * (1.0 + v * np.sin(6.0 * y[:, :, :2]))
        q[:, 2, :, 0] = q[:, 2, :, 3]
        q[:, 2, :, 1] = q[:, 2, :, 2]

    a = pointwise_case("cpu").run()
    b = simulation("cpu", pointwise_source(drag_and_rain, params=[3.0, 0.5]),
                   (inflow_arrays, "extrap", "wall", "wall")).run()
    assert a.steps == b.steps
    np.testing.assert_allclose(interior(a), interior(b), rtol=1e-14, atol=1e-15)


def test_subcycled_levels_get_their_rows_in_place():
    """Subcycling calls a context hook once per level with that level's rows (no
    gather/scatter): the same result as the array-level hook on gathered levels."""
    kw = dict(max_level=2, refine_threshold=0.08, regrid_interval=2, subcycle=True)
    a = pointwise_case("cpu", **kw).run()
    wall = pointwise_boundary(inflow, params=[1.1, 0.3], value=lambda t: 0.5 + t)
    b = simulation("cpu", drag_and_rain_arrays(2, [3.0, 0.5]),
                   (wall, "extrap", "wall", "wall"), **kw).run()
    assert a.subcycling and len(a.patches_per_level()) == 2
    assert a.level_steps == b.level_steps and a.forest == b.forest
    np.testing.assert_allclose(interior(a), interior(b), rtol=1e-14, atol=1e-15)


def test_context_geometry_matches_the_cell_centres():
    sim = pointwise_case("cpu")
    ctx = sim.hook_context(0.25, 0.01)
    g = ctx.geometry
    x, y = sim.centers_host
    b = sim.mbc
    i = np.arange(g.mx) + 0.5
    assert np.array_equal(x[:, b, b:-b], g.xlower[:, None] + g.dx[:, None] * i[None, :])
    assert ctx.n == sim.geom.npatch and ctx.allreduce(2.5) == 2.5 and ctx.dt == 0.01


# ------------------------------------------------------------------ launcher
@numba.njit
def _depth_sums(q, k, j, i, mbc, acc):
    h = q[k, 0, mbc + j, mbc + i]
    acc[0] += h
    acc[1] += h * h


@numba.njit
def _mean_and_spread(q, k, sums, vals):
    vals[0] = sums[0] / 16.0
    vals[1] = sums[1]


@numba.njit
def _centre(q, k, j, i, mbc, vals):
    q[k, 1, mbc + j, mbc + i] = q[k, 0, mbc + j, mbc + i] - vals[0]


@numba.njit
def _when_large(q, totals):
    return totals[0] > 1.0


@numba.njit
def _all_depths(q, totals, k, j, i, mbc, acc):
    acc[0] += q[k, 0, mbc + j, mbc + i]


@numba.njit
def _halve(q, totals):
    totals[3] = 0.5 * totals[2]


@numba.njit
def _mark(q, totals, k, j, i, mbc):
    q[k, 2, mbc + j, mbc + i] = totals[2] + totals[1] + totals[3]


CENTRE = PatchReduction(_depth_sums, _mean_and_spread, 2, 2, cell_apply=_centre,
                        domain_needed=_when_large, domain_reduce=_all_depths, ndomain=1,
                        finish=_halve, domain_apply=_mark)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_per_patch_reduction_and_domain_pass(backend):
    from forestpy.backend import get_backend

    be = get_backend(backend)
    rng = np.random.default_rng(3)
    q0 = rng.random((5, 3, 8, 8))
    q = be.to_device(q0.copy())
    rows = be.to_device(np.array([4, 0, 2]))
    totals = be.to_host(for_each_patch(CENTRE, 3, 4, 4, 2, q, backend=be, rows=rows,
                                       nall=5))
    q = be.to_host(q)
    h = q0[:, 0, 2:-2, 2:-2]
    mean = h.sum(axis=(1, 2)) / 16.0
    for k in (4, 0, 2):
        np.testing.assert_allclose(q[k, 1, 2:-2, 2:-2], h[k] - mean[k], rtol=1e-14,
                                   atol=1e-15)
    for k in (1, 3):  # not in the batch
        assert np.array_equal(q[k, 1], q0[k, 1])
    assert totals[0] == pytest.approx(mean[[4, 0, 2]].sum(), rel=1e-14)
    assert totals[1] == pytest.approx((h[[4, 0, 2]] ** 2).sum(), rel=1e-14)
    # the domain pass (totals[0] > 1) saw every patch, after the epilogue
    assert totals[2] == pytest.approx(h.sum(), rel=1e-14) and totals[3] == 0.5 * totals[2]
    np.testing.assert_allclose(q[:, 2, 2:-2, 2:-2], 1.5 * h.sum() + totals[1], rtol=1e-14)
    # the GPU's ticket was put back: a second launch finds the totals again
    again = be.to_host(for_each_patch(CENTRE, 3, 4, 4, 2, be.to_device(q0.copy()), backend=be,
                                      rows=rows, nall=5))
    assert np.array_equal(again, totals)


def test_per_patch_reduction_over_no_patch_zeroes_a_given_totals_buffer():
    # a rank owning no patch reuses its totals buffer between calls (GeoClaw's sources):
    # the sums of an empty call are zero, not what the buffer held
    from forestpy.backend import get_backend

    be = get_backend("cpu")
    buf = np.full(CENTRE.nvals + CENTRE.ndomain + 1, np.nan)
    q = np.zeros((0, 3, 8, 8))
    got = for_each_patch(CENTRE, 0, 4, 4, 2, q, backend=be, nall=0, totals=buf)
    assert got is buf and np.array_equal(buf, np.zeros_like(buf))


@pytest.mark.parametrize("n, m", [(40, 4), (3, 20)])  # more patches / cells than threads
def test_per_patch_reduction_gives_the_same_bits_on_both_backends(n, m):
    """The CPU sums in the GPU block's order, so positivity and the like cannot part
    the two backends' runs (sequential sums of these data round differently)."""
    from forestpy.backend import get_backend

    rng = np.random.default_rng(5)
    q0 = rng.random((n, 3, m + 4, m + 4)) * 10.0 ** rng.integers(-8, 8, (n, 3, m + 4, m + 4))
    out = []
    for name in ("cpu", "gpu"):
        be = get_backend(name)
        q = be.to_device(q0.copy())
        totals = be.to_host(for_each_patch(CENTRE, n, m, m, 2, q, backend=be, nall=n))
        out.append((totals, be.to_host(q)))
    assert np.array_equal(out[0][0], out[1][0])
    assert np.array_equal(out[0][1], out[1][1])
    h = q0[:, 0, 2:-2, 2:-2]
    sequential = [math.fsum(h[k].ravel().tolist()) for k in range(n)]  # exact
    # one by one (Python's sum() compensates from 3.12 on)
    naive = np.array([functools.reduce(operator.add, h[k].ravel().tolist(), 0.0)
                      for k in range(n)])
    assert not np.array_equal(naive, np.array(sequential))  # the order matters here
    np.testing.assert_allclose(out[0][0][2], math.fsum(sequential), rtol=1e-13)


@numba.njit
def _shift(q, v, k, j, i, mbc, s):
    s[0] = q[k, 0, mbc + j, mbc + i] + v
    q[k, 0, mbc + j, mbc + i] = s[0] * (k + 1)


def test_cell_launcher_rows_and_scratch_both_backends():
    from forestpy.backend import get_backend

    q0 = np.random.default_rng(1).random((4, 1, 6, 6))
    out = []
    for name in ("cpu", "gpu"):
        be = get_backend(name)
        q = be.to_device(q0.copy())
        for_each_cell(_shift, 2, 4, 4, 1, q, 0.5, backend=be, rows=be.to_device(
            np.array([3, 1])), scratch=(1,))
        out.append(be.to_host(q))
    assert np.array_equal(out[0], out[1])
    ref = q0.copy()
    for k in (3, 1):
        ref[k, 0, 1:-1, 1:-1] = (ref[k, 0, 1:-1, 1:-1] + 0.5) * (k + 1)
    assert np.array_equal(out[0], ref)


def test_context_of_geometry_for_direct_calls():
    from forestpy.backend import CPUBackend
    from forestpy.forest import Brick, Forest
    from forestpy.patches import PatchGeometry

    geom = PatchGeometry.from_forest(Forest.new(Brick(), 1), 4, 4, 2)
    ctx = HookContext.of_geometry(geom, CPUBackend(), t=1.0)
    q = np.ones((geom.npatch, 3, 8, 8))
    hook = pointwise_source(drag_and_rain, params=[0.0, 1.0])
    ctx.dt = 0.5
    hook.apply(q, np.zeros((geom.npatch, 0, 8, 8)), ctx)
    assert (q[:, 0, 2:-2, 2:-2] > 1.0).all() and (q[:, 0, :2] == 1.0).all()
