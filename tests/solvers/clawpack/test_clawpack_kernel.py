"""Tests of the batched Clawpack step kernel against an independent pure-Python
reference of the unsplit wave-propagation algorithm (Clawpack 4.x step2/flux2)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from forestpy.solvers.clawpack import LIMITERS, make_fluctuation_kernel, make_step_kernel
from forestpy.solvers.clawpack.limiters import limiter_apply
from fwave_advection import fwave_advection

from forestpy.vtable import RiemannSolver, get_riemann

# --------------------------------------------------------------------------------------
# small test solvers (plain Python; the kernels compile them)
# --------------------------------------------------------------------------------------


# the registered acoustics solver; the kernel's independent check is the loop-form
# reference implementation below, not a second copy of the physics
ACOUSTICS = get_riemann("acoustics")


# conservative advection with cell velocities in aux, in f-wave form (fwave_advection.py,
# shared with test_gpu_kernel.py)
FWAVE_ADV = fwave_advection("test_fwave_advection", num_aux=2)

# --------------------------------------------------------------------------------------
# pure-Python reference: one grid, Clawpack 4.x formulas in the plainest loop form
# --------------------------------------------------------------------------------------


def phi_reference(name, r):
    if name == "none":
        return 1.0
    if name == "minmod":
        return max(0.0, min(1.0, r))
    if name == "superbee":
        return max(0.0, min(1.0, 2.0 * r), min(2.0, r))
    if name == "vanleer":
        return (r + abs(r)) / (1.0 + abs(r))
    if name == "mc":
        return max(0.0, min((1.0 + r) / 2.0, 2.0, 2.0 * r))
    raise ValueError(name)


def reference_step(solver, q, aux, mbc, dx, dy, dt, params, limiters, order, tw, capa):
    """q (meqn, my+2mbc, mx+2mbc), aux (maux, ...). Returns qnew, fm, fp, gm, gp, cfl with
    the flux arrays as dicts keyed by the interior index (i, j) of the interface."""
    meqn, nyt, nxt = q.shape
    my = nyt - 2 * mbc
    mx = nxt - 2 * mbc
    mw = solver.num_waves

    def Q(i, j):
        return q[:, j + mbc, i + mbc].copy()

    def A(i, j):
        return aux[:, j + mbc, i + mbc].copy()

    def kappa(i, j):
        return aux[capa, j + mbc, i + mbc] if capa >= 0 else 1.0

    def riemann(ixy, ql, qr, al, ar):
        wave = np.zeros((meqn, mw))
        s = np.zeros(mw)
        am = np.zeros(meqn)
        ap = np.zeros(meqn)
        solver.rpn2(ixy, ql, qr, al, ar, params, wave, s, am, ap)
        return wave, s, am, ap

    def transverse(ixy, imp, ql, qr, a1, a2, a3, asdq):
        bm = np.zeros(meqn)
        bp = np.zeros(meqn)
        solver.rpt2(ixy, imp, ql, qr, a1, a2, a3, params, asdq, bm, bp)
        return bm, bp

    def correction(waves, speeds, i, dtdx_ave):
        """second-order correction at interface i from the waves at i-1, i, i+1"""
        cq = np.zeros(meqn)
        if order != 2:
            return cq
        for p in range(mw):
            w = waves[i][:, p]
            norm2 = float(np.dot(w, w))
            if norm2 == 0.0:
                continue
            sp = speeds[i][p]
            upwind = waves[i - 1][:, p] if sp > 0 else waves[i + 1][:, p]
            ratio = float(np.dot(upwind, w)) / norm2
            wlim = phi_reference(limiters[p], ratio) * w
            if solver.fwave:
                cq += math.copysign(1.0, sp) * (1.0 - abs(sp) * dtdx_ave) * wlim
            else:
                cq += abs(sp) * (1.0 - abs(sp) * dtdx_ave) * wlim
        return cq

    fm = defaultdict(lambda: np.zeros(meqn))
    fp = defaultdict(lambda: np.zeros(meqn))
    gm = defaultdict(lambda: np.zeros(meqn))
    gp = defaultdict(lambda: np.zeros(meqn))
    cfl = 0.0

    # x-sweeps
    for j in range(-1, my + 1):
        waves, speeds, amdq, apdq = {}, {}, {}, {}
        for i in range(-1, mx + 2):
            waves[i], speeds[i], amdq[i], apdq[i] = riemann(1, Q(i - 1, j), Q(i, j),
                                                            A(i - 1, j), A(i, j))
        for i in range(0, mx + 1):
            dtdx_l = dt / (kappa(i - 1, j) * dx)
            dtdx_r = dt / (kappa(i, j) * dx)
            if 0 <= j < my:
                for sp in speeds[i]:
                    cfl = max(cfl, dtdx_r * sp, -dtdx_l * sp)
            cq = correction(waves, speeds, i, 0.5 * (dtdx_l + dtdx_r))
            fm[i, j] = fm[i, j] + amdq[i] + 0.5 * cq
            fp[i, j] = fp[i, j] - apdq[i] + 0.5 * cq
            if tw >= 1:
                left = amdq[i] + cq if tw == 2 else amdq[i]
                right = apdq[i] - cq if tw == 2 else apdq[i]
                bm, bp = transverse(1, 1, Q(i - 1, j), Q(i, j), A(i - 1, j - 1), A(i - 1, j),
                                    A(i - 1, j + 1), left)
                gm[i - 1, j] = gm[i - 1, j] - 0.5 * dtdx_l * bm
                gp[i - 1, j] = gp[i - 1, j] - 0.5 * dtdx_l * bm
                gm[i - 1, j + 1] = gm[i - 1, j + 1] - 0.5 * dtdx_l * bp
                gp[i - 1, j + 1] = gp[i - 1, j + 1] - 0.5 * dtdx_l * bp
                bm, bp = transverse(1, 2, Q(i - 1, j), Q(i, j), A(i, j - 1), A(i, j),
                                    A(i, j + 1), right)
                gm[i, j] = gm[i, j] - 0.5 * dtdx_r * bm
                gp[i, j] = gp[i, j] - 0.5 * dtdx_r * bm
                gm[i, j + 1] = gm[i, j + 1] - 0.5 * dtdx_r * bp
                gp[i, j + 1] = gp[i, j + 1] - 0.5 * dtdx_r * bp

    # y-sweeps
    for i in range(-1, mx + 1):
        waves, speeds, amdq, apdq = {}, {}, {}, {}
        for j in range(-1, my + 2):
            waves[j], speeds[j], amdq[j], apdq[j] = riemann(2, Q(i, j - 1), Q(i, j),
                                                            A(i, j - 1), A(i, j))
        for j in range(0, my + 1):
            dtdy_b = dt / (kappa(i, j - 1) * dy)
            dtdy_t = dt / (kappa(i, j) * dy)
            if 0 <= i < mx:
                for sp in speeds[j]:
                    cfl = max(cfl, dtdy_t * sp, -dtdy_b * sp)
            cq = correction(waves, speeds, j, 0.5 * (dtdy_b + dtdy_t))
            gm[i, j] = gm[i, j] + amdq[j] + 0.5 * cq
            gp[i, j] = gp[i, j] - apdq[j] + 0.5 * cq
            if tw >= 1:
                below = amdq[j] + cq if tw == 2 else amdq[j]
                above = apdq[j] - cq if tw == 2 else apdq[j]
                bm, bp = transverse(2, 1, Q(i, j - 1), Q(i, j), A(i - 1, j - 1), A(i, j - 1),
                                    A(i + 1, j - 1), below)
                fm[i, j - 1] = fm[i, j - 1] - 0.5 * dtdy_b * bm
                fp[i, j - 1] = fp[i, j - 1] - 0.5 * dtdy_b * bm
                fm[i + 1, j - 1] = fm[i + 1, j - 1] - 0.5 * dtdy_b * bp
                fp[i + 1, j - 1] = fp[i + 1, j - 1] - 0.5 * dtdy_b * bp
                bm, bp = transverse(2, 2, Q(i, j - 1), Q(i, j), A(i - 1, j), A(i, j),
                                    A(i + 1, j), above)
                fm[i, j] = fm[i, j] - 0.5 * dtdy_t * bm
                fp[i, j] = fp[i, j] - 0.5 * dtdy_t * bm
                fm[i + 1, j] = fm[i + 1, j] - 0.5 * dtdy_t * bp
                fp[i + 1, j] = fp[i + 1, j] - 0.5 * dtdy_t * bp

    qnew = q.copy()
    for j in range(my):
        for i in range(mx):
            k = kappa(i, j)
            qnew[:, j + mbc, i + mbc] = (
                q[:, j + mbc, i + mbc]
                - dt / (k * dx) * (fm[i + 1, j] - fp[i, j])
                - dt / (k * dy) * (gm[i, j + 1] - gp[i, j])
            )
    return qnew, fm, fp, gm, gp, cfl


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------

MX, MY, MBC = 6, 5, 2
DX = np.array([0.11, 0.07])
DY = np.array([0.09, 0.13])


def make_data(solver, capa, seed):
    rng = np.random.default_rng(seed)
    npatch = 2
    shape = (MY + 2 * MBC, MX + 2 * MBC)
    q = rng.standard_normal((npatch, solver.num_eqn) + shape)
    if solver is FWAVE_ADV:
        fields = [rng.uniform(-1.0, 1.0, (npatch,) + shape) for _ in range(2)]
    else:
        fields = []
    if capa >= 0:
        fields.append(rng.uniform(0.6, 1.5, (npatch,) + shape))
    if fields:
        aux = np.stack(fields, axis=1)
    else:
        aux = np.zeros((npatch, 0) + shape)
    if solver is FWAVE_ADV:
        dt = 0.02
        params = np.zeros(1)
    else:
        dt = 0.015
        params = solver.params_array()
    return q, np.ascontiguousarray(aux), dt, params


def run_kernel(kernel, q, aux, mbc, dx, dy, dt, params, codes):
    npatch, meqn, nyt, nxt = q.shape
    mx, my = nxt - 2 * mbc, nyt - 2 * mbc
    qnew = q.copy()
    cfl = np.full(npatch, -1.0)
    edge = np.full((npatch, 4, meqn, max(mx, my)), np.nan)
    kernel(q, mbc, aux, qnew, dx, dy, dt, params, np.asarray(codes, dtype=np.int64), cfl, edge)
    return qnew, cfl, edge


LIMITER_SETS = {
    1: [("none", "none")],
    2: [(n, n) for n in LIMITERS] + [("mc", "minmod"), ("superbee", "vanleer")],
}


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------


def test_limiters():
    for name, code in LIMITERS.items():
        for r in (-2.0, -0.3, 0.0, 0.2, 0.5, 0.8, 1.0, 1.7, 2.5, 10.0):
            assert limiter_apply(code, r) == pytest.approx(phi_reference(name, r), abs=1e-15)


@pytest.mark.parametrize("capa", [False, True])
@pytest.mark.parametrize("tw", [0, 1, 2])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("solver", [ACOUSTICS, FWAVE_ADV], ids=["acoustics", "fwave_adv"])
def test_kernel_matches_reference(solver, order, tw, capa):
    capa_index = (2 if solver is FWAVE_ADV else 0) if capa else -1
    kernel = make_step_kernel(solver, order=order, transverse_waves=tw,
                              capacity_index=capa_index)
    assert make_step_kernel(solver, order=order, transverse_waves=tw,
                            capacity_index=capa_index) is kernel
    q, aux, dt, params = make_data(solver, capa_index, seed=7 * order + tw + 31 * capa)
    mw = solver.num_waves
    fluct = make_fluctuation_kernel(solver)
    for lims in LIMITER_SETS[order]:
        names = [lims[p % 2] for p in range(mw)]
        codes = [LIMITERS[n] for n in names]
        qnew, cfl, edge = run_kernel(kernel, q, aux, MBC, DX, DY, dt, params, codes)
        for ip in range(2):
            ref, fm, fp, gm, gp, rcfl = reference_step(
                solver, q[ip], aux[ip], MBC, DX[ip], DY[ip], dt, params, names, order,
                tw if order == 2 else min(tw, 1), capa_index)
            inner = (slice(None), slice(MBC, MBC + MY), slice(MBC, MBC + MX))
            np.testing.assert_allclose(qnew[ip][inner], ref[inner], rtol=0, atol=1e-13)
            # ghost cells of qnew are left alone
            assert np.array_equal(qnew[ip][:, :MBC], q[ip][:, :MBC])
            assert cfl[ip] == pytest.approx(rcfl, rel=1e-14, abs=1e-15)
            # edge fluctuation fluxes
            for j in range(MY):
                np.testing.assert_allclose(edge[ip, 0, :, j], fp[0, j], atol=1e-13, rtol=0)
                np.testing.assert_allclose(edge[ip, 1, :, j], fm[MX, j], atol=1e-13, rtol=0)
            for i in range(MX):
                np.testing.assert_allclose(edge[ip, 2, :, i], gp[i, 0], atol=1e-13, rtol=0)
                np.testing.assert_allclose(edge[ip, 3, :, i], gm[i, MY], atol=1e-13, rtol=0)
            # the interior update is the flux-form sum of the reference fluxes
            kap = aux[ip, capa_index] if capa_index >= 0 else np.ones(q.shape[2:])
            for j in range(MY):
                for i in range(MX):
                    k = kap[j + MBC, i + MBC]
                    expect = (q[ip, :, j + MBC, i + MBC]
                              - dt / (k * DX[ip]) * (fm[i + 1, j] - fp[i, j])
                              - dt / (k * DY[ip]) * (gm[i, j + 1] - gp[i, j]))
                    np.testing.assert_allclose(qnew[ip, :, j + MBC, i + MBC], expect,
                                               atol=1e-13, rtol=0)
            # telescoping: interior total change = boundary fluxes + interior fluctuations
            _check_telescoping(fluct, solver, q[ip], aux[ip], qnew[ip], edge[ip], kap,
                               DX[ip], DY[ip], dt, params)

    # a constant state stays constant (constant velocities for the advection solver)
    qc = np.empty_like(q)
    qc[:] = np.linspace(0.5, 1.5, solver.num_eqn)[None, :, None, None]
    auxc = aux.copy()
    if solver is FWAVE_ADV:
        auxc[:, 0] = 0.7
        auxc[:, 1] = -0.4
    qnew, cfl, _ = run_kernel(kernel, qc, auxc, MBC, DX, DY, dt, params,
                              [LIMITERS["mc"]] * mw)
    np.testing.assert_allclose(qnew, qc, rtol=0, atol=1e-15)


def _check_telescoping(fluct, solver, q, aux, qnew, edge, kap, dx, dy, dt, params):
    meqn = q.shape[0]
    inner = (slice(MBC, MBC + MY), slice(MBC, MBC + MX))
    total = ((qnew[:, inner[0], inner[1]] - q[:, inner[0], inner[1]])
             * kap[inner][None]).sum(axis=(1, 2))
    # interior interfaces: amdq + apdq does not cancel between neighbours
    cells = q[:, inner[0], inner[1]]
    caux = aux[:, inner[0], inner[1]]

    def rows(a):  # (ncomp, ny, nx) -> (ny * nx, ncomp), contiguous
        return np.ascontiguousarray(a.reshape(a.shape[0], a.shape[1] * a.shape[2]).T)

    fx = np.empty((MY * (MX - 1), meqn))
    fluct(1, rows(cells[:, :, :-1]), rows(cells[:, :, 1:]), rows(caux[:, :, :-1]),
          rows(caux[:, :, 1:]), params, fx)
    fy = np.empty(((MY - 1) * MX, meqn))
    fluct(2, rows(cells[:, :-1, :]), rows(cells[:, 1:, :]), rows(caux[:, :-1, :]),
          rows(caux[:, 1:, :]), params, fy)
    expect = (dt / dx * (edge[0, :, :MY].sum(axis=1) - edge[1, :, :MY].sum(axis=1)
                         - fx.sum(axis=0))
              + dt / dy * (edge[2, :, :MX].sum(axis=1) - edge[3, :, :MX].sum(axis=1)
                           - fy.sum(axis=0)))
    np.testing.assert_allclose(total, expect, rtol=0, atol=1e-12)


def test_fluctuation_kernel_matches_rpn2():
    rng = np.random.default_rng(3)
    for solver in (ACOUSTICS, FWAVE_ADV):
        n = 37
        meqn = solver.num_eqn
        ql = rng.standard_normal((n, meqn))
        qr = rng.standard_normal((n, meqn))
        al = rng.standard_normal((n, solver.num_aux))
        ar = rng.standard_normal((n, solver.num_aux))
        params = solver.params_array() if solver.param_names else np.zeros(1)
        fluct = make_fluctuation_kernel(solver)
        assert make_fluctuation_kernel(solver) is fluct
        for ixy in (1, 2):
            out = np.empty((n, meqn))
            fluct(ixy, ql, qr, al, ar, params, out)
            for k in range(n):
                wave = np.zeros((meqn, solver.num_waves))
                s = np.zeros(solver.num_waves)
                am = np.zeros(meqn)
                ap = np.zeros(meqn)
                solver.rpn2(ixy, ql[k], qr[k], al[k], ar[k], params, wave, s, am, ap)
                np.testing.assert_allclose(out[k], am + ap, rtol=1e-15, atol=1e-15)


def test_courant_one_advection_shifts_exactly():
    kernel = make_step_kernel(FWAVE_ADV, order=1, transverse_waves=0)
    rng = np.random.default_rng(11)
    mx, my, mbc = 8, 6, 2
    dx = np.array([0.125])
    dy = np.array([0.25])
    dt = 0.0625
    q = rng.standard_normal((1, 1, my + 2 * mbc, mx + 2 * mbc))
    for direction in ("x", "y"):
        aux = np.zeros((1, 2, my + 2 * mbc, mx + 2 * mbc))
        if direction == "x":
            aux[:, 0] = dx[0] / dt
        else:
            aux[:, 1] = dy[0] / dt
        qnew, cfl, _ = run_kernel(kernel, q, aux, mbc, dx, dy, dt, np.zeros(1), [0])
        inner = (slice(mbc, mbc + my), slice(mbc, mbc + mx))
        if direction == "x":
            shifted = q[0, 0, mbc:mbc + my, mbc - 1:mbc + mx - 1]
        else:
            shifted = q[0, 0, mbc - 1:mbc + my - 1, mbc:mbc + mx]
        np.testing.assert_allclose(qnew[0, 0][inner], shifted, rtol=0, atol=1e-15)
        assert cfl[0] == pytest.approx(1.0, rel=1e-15)


def test_patch_independence():
    solver = ACOUSTICS
    kernel = make_step_kernel(solver, order=2, transverse_waves=2)
    rng = np.random.default_rng(5)
    n, mbc, half = 16, 2, 8
    field = rng.standard_normal((3, n, n))
    big = np.pad(field, ((0, 0), (mbc, mbc), (mbc, mbc)), mode="wrap")
    params = solver.params_array()
    codes = [LIMITERS["mc"], LIMITERS["superbee"]]
    dt = 0.004
    one = big[None].copy()
    qnew1, cfl1, _ = run_kernel(kernel, one, np.zeros((1, 0) + big.shape[1:]), mbc,
                                np.array([0.0625]), np.array([0.0625]), dt, params, codes)
    patches = []
    for pj in range(2):
        for pi in range(2):
            j0, i0 = pj * half, pi * half
            patches.append(big[:, j0:j0 + half + 2 * mbc, i0:i0 + half + 2 * mbc])
    four = np.ascontiguousarray(np.stack(patches))
    qnew4, cfl4, _ = run_kernel(kernel, four, np.zeros((4, 0) + four.shape[2:]), mbc,
                                np.full(4, 0.0625), np.full(4, 0.0625), dt, params, codes)
    for p, (pj, pi) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        j0, i0 = pj * half, pi * half
        a = qnew4[p, :, mbc:mbc + half, mbc:mbc + half]
        b = qnew1[0, :, mbc + j0:mbc + j0 + half, mbc + i0:mbc + i0 + half]
        assert np.array_equal(a, b)
    assert cfl4.max() == cfl1[0]


def test_invalid_options():
    with pytest.raises(ValueError):
        make_step_kernel(ACOUSTICS, order=3)
    with pytest.raises(ValueError):
        make_step_kernel(ACOUSTICS, transverse_waves=5)
    no_rpt2 = RiemannSolver("x", 3, 2, ACOUSTICS.rpn2, None, param_names=("rho", "bulk"),
                            default_params={"rho": 1.0, "bulk": 1.0})
    with pytest.raises(ValueError):
        make_step_kernel(no_rpt2, transverse_waves=1)


def test_shallow_roe_matches_reference():
    mod = pytest.importorskip("forestpy.extensions.riemann.shallow_roe")
    solver = mod.shallow_roe
    kernel = make_step_kernel(solver, order=2, transverse_waves=2)
    rng = np.random.default_rng(2)
    shape = (MY + 2 * MBC, MX + 2 * MBC)
    q = np.empty((2, 3) + shape)
    q[:, 0] = rng.uniform(0.8, 1.6, (2,) + shape)
    q[:, 1:] = 0.3 * rng.standard_normal((2, 2) + shape)
    aux = np.zeros((2, 0) + shape)
    params = solver.params_array()
    dt = 0.015
    codes = [LIMITERS["mc"]] * 3
    qnew, cfl, edge = run_kernel(kernel, q, aux, MBC, DX, DY, dt, params, codes)
    for ip in range(2):
        ref, fm, fp, gm, gp, rcfl = reference_step(solver, q[ip], aux[ip], MBC, DX[ip],
                                                   DY[ip], dt, params, ["mc"] * 3, 2, 2, -1)
        np.testing.assert_allclose(qnew[ip], ref, rtol=0, atol=1e-13)
        assert cfl[ip] == pytest.approx(rcfl, rel=1e-14)
        for j in range(MY):
            np.testing.assert_allclose(edge[ip, 0, :, j], fp[0, j], atol=1e-13, rtol=0)
            np.testing.assert_allclose(edge[ip, 1, :, j], fm[MX, j], atol=1e-13, rtol=0)
