"""Tests of the built-in pointwise Riemann solvers (forestpy.extensions.riemann)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from forestpy.extensions.riemann import (
    BUILTIN_SOLVERS,
    acoustics,
    advection,
    advection_variable,
    euler,
    shallow_hlle,
    shallow_roe,
)

from forestpy.vtable import RiemannSolver, available_riemann, get_riemann

ALL = {sol.name: sol for sol in BUILTIN_SOLVERS}
CONSERVATIVE = ["advection", "acoustics", "shallow_roe", "shallow_hlle", "euler"]
SYSTEMS = ["acoustics", "shallow_roe", "shallow_hlle", "euler"]
NSAMPLES = 40
SENTINEL = 1.2345e300


# --------------------------------------------------------------------------- helpers


def random_case(name: str, rng: np.random.Generator):
    """Random physically valid ``(ql, qr, auxl, auxr, params)`` for solver ``name``."""
    sol = ALL[name]
    aux_l = rng.uniform(-1.5, 1.5, max(sol.num_aux, 1))
    aux_r = rng.uniform(-1.5, 1.5, max(sol.num_aux, 1))
    if name in ("advection", "advection_variable"):
        ql = rng.uniform(-1.0, 1.0, 1)
        qr = rng.uniform(-1.0, 1.0, 1)
        params = rng.uniform(-1.5, 1.5, 2) if name == "advection" else np.zeros(1)
    elif name == "acoustics":
        ql = rng.uniform(-1.0, 1.0, 3)
        qr = rng.uniform(-1.0, 1.0, 3)
        params = np.array([rng.uniform(0.5, 2.0), rng.uniform(0.5, 5.0)])
    elif name in ("shallow_roe", "shallow_hlle"):
        params = np.array([rng.choice([1.0, 9.81])])

        def state():
            h = rng.uniform(0.05, 2.0)
            u, v = rng.uniform(-2.0, 2.0, 2)
            return np.array([h, h * u, h * v])

        ql, qr = state(), state()
    elif name == "euler":
        gamma = rng.choice([1.4, 5.0 / 3.0])
        params = np.array([gamma])

        def state():
            rho = rng.uniform(0.1, 2.0)
            u, v = rng.uniform(-2.0, 2.0, 2)
            p = rng.uniform(0.05, 3.0)
            return np.array([rho, rho * u, rho * v, p / (gamma - 1) + 0.5 * rho * (u * u + v * v)])

        ql, qr = state(), state()
    else:  # pragma: no cover
        raise KeyError(name)
    return ql, qr, aux_l, aux_r, params


def flux(name: str, q, ixy: int, params):
    """Physical flux in direction ``ixy`` (works on complex arrays for complex steps)."""
    q = np.asarray(q)
    f = np.zeros_like(q)
    mn, mt = ixy, 3 - ixy
    if name == "advection":
        f[0] = params[ixy - 1] * q[0]
    elif name == "acoustics":
        rho, bulk = params
        f[0] = bulk * q[mn]
        f[mn] = q[0] / rho
        f[mt] = 0.0
    elif name in ("shallow_roe", "shallow_hlle"):
        g = params[0]
        h = q[0]
        un, ut = q[mn] / h, q[mt] / h
        f[0] = h * un
        f[mn] = h * un * un + 0.5 * g * h * h
        f[mt] = h * un * ut
    elif name == "euler":
        gamma = params[0]
        rho = q[0]
        un, ut = q[mn] / rho, q[mt] / rho
        p = (gamma - 1.0) * (q[3] - 0.5 * rho * (un * un + ut * ut))
        f[0] = rho * un
        f[mn] = rho * un * un + p
        f[mt] = rho * un * ut
        f[3] = un * (q[3] + p)
    else:  # pragma: no cover
        raise KeyError(name)
    return f


def jacobian(name: str, q, ixy: int, params):
    """Exact flux Jacobian by complex-step differentiation."""
    n = len(q)
    step = 1e-30
    jac = np.zeros((n, n))
    for j in range(n):
        qc = np.array(q, dtype=complex)
        qc[j] += 1j * step
        jac[:, j] = flux(name, qc, ixy, params).imag / step
    return jac


def roe_state(name: str, ql, qr, params):
    """State at which the flux Jacobian equals the Roe matrix (computed independently)."""
    if name == "acoustics":
        return 0.5 * (ql + qr)
    sl, sr = np.sqrt(ql[0]), np.sqrt(qr[0])

    def avg(a, b):
        return (sl * a + sr * b) / (sl + sr)

    u = avg(ql[1] / ql[0], qr[1] / qr[0])
    v = avg(ql[2] / ql[0], qr[2] / qr[0])
    if name in ("shallow_roe", "shallow_hlle"):
        h = 0.5 * (ql[0] + qr[0])
        return np.array([h, h * u, h * v])
    gamma = params[0]

    def enthalpy(q):
        p = (gamma - 1.0) * (q[3] - 0.5 * (q[1] ** 2 + q[2] ** 2) / q[0])
        return (q[3] + p) / q[0]

    big_h = avg(enthalpy(ql), enthalpy(qr))
    rho = sl * sr  # the Jacobian of the Euler flux depends on u, v, H only
    energy = rho * (big_h + 0.5 * (gamma - 1.0) * (u * u + v * v)) / gamma
    return np.array([rho, rho * u, rho * v, energy])


def call_rpn2(sol: RiemannSolver, ixy, ql, qr, auxl, auxr, params, fn=None):
    fn = sol.rpn2 if fn is None else fn
    wave = np.full((sol.num_eqn, sol.num_waves), SENTINEL)
    s = np.full(sol.num_waves, SENTINEL)
    amdq = np.full(sol.num_eqn, SENTINEL)
    apdq = np.full(sol.num_eqn, SENTINEL)
    fn(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq)
    return wave, s, amdq, apdq


def call_rpt2(sol: RiemannSolver, ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, fn=None):
    fn = sol.rpt2 if fn is None else fn
    bmasdq = np.full(sol.num_eqn, SENTINEL)
    bpasdq = np.full(sol.num_eqn, SENTINEL)
    fn(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq)
    return bmasdq, bpasdq


def assert_written(*arrays):
    for a in arrays:
        assert not np.any(a == SENTINEL), "an output entry was left unwritten"
        assert np.all(np.isfinite(a))


def swap(q):
    """Exchange the x and y components (indices 1 and 2)."""
    p = np.array(q, copy=True)
    p[[1, 2]] = p[[2, 1]]
    return p


_COMPILED: dict[str, tuple] = {}


def compiled(sol: RiemannSolver):
    if sol.name not in _COMPILED:
        _COMPILED[sol.name] = (numba.njit(sol.rpn2), numba.njit(sol.rpt2))
    return _COMPILED[sol.name]


# --------------------------------------------------------------------------- (h) registry


def test_registry_lists_all_six():
    names = available_riemann()
    for name in ALL:
        assert name in names
    assert len(ALL) == 6
    assert get_riemann("shallow_roe") is shallow_roe
    assert get_riemann(euler) is euler
    with pytest.raises(KeyError):
        get_riemann("no_such_solver")


@pytest.mark.parametrize("name", sorted(ALL))
def test_metadata(name):
    sol = get_riemann(name)
    assert sol.name == name
    assert sol.fwave is False
    assert len(sol.field_names) == sol.num_eqn
    assert sol.description
    assert sol.rpt2 is not None
    params = sol.params_array()
    assert params.dtype == np.float64
    assert set(sol.default_params) == set(sol.param_names)


def test_field_and_param_names():
    assert advection.field_names == ("q",) and advection.param_names == ("u", "v")
    assert dict(advection.default_params) == {"u": 1.0, "v": 0.5}
    assert advection_variable.num_aux == 2 and advection_variable.field_names == ("q",)
    assert acoustics.field_names == ("p", "u", "v")
    assert dict(acoustics.default_params) == {"rho": 1.0, "bulk": 4.0}
    assert (acoustics.num_eqn, acoustics.num_waves) == (3, 2)
    for sol in (shallow_roe, shallow_hlle):
        assert sol.field_names == ("h", "hu", "hv")
        assert dict(sol.default_params) == {"grav": 1.0}
    assert (shallow_roe.num_waves, shallow_hlle.num_waves) == (3, 2)
    assert euler.field_names == ("rho", "rhou", "rhov", "E")
    assert dict(euler.default_params) == {"gamma": 1.4}
    assert (euler.num_eqn, euler.num_waves) == (4, 3)


# --------------------------------------------------------------------------- (a) conservation


@pytest.mark.parametrize("name", CONSERVATIVE)
def test_fluctuations_sum_to_flux_difference(name):
    sol = ALL[name]
    rng = np.random.default_rng(1)
    for _ in range(NSAMPLES):
        ql, qr, auxl, auxr, params = random_case(name, rng)
        for ixy in (1, 2):
            wave, s, amdq, apdq = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params)
            assert_written(wave, s, amdq, apdq)
            fl, fr = flux(name, ql, ixy, params), flux(name, qr, ixy, params)
            scale = np.abs(fl).max() + np.abs(fr).max()
            np.testing.assert_allclose(amdq + apdq, fr - fl, rtol=0, atol=1e-12 * scale)
            # the fluctuations are also the speed-weighted waves
            np.testing.assert_allclose(wave @ s, fr - fl, rtol=0, atol=1e-12 * scale)


def test_color_equation_fluctuations():
    sol = advection_variable
    rng = np.random.default_rng(2)
    for _ in range(NSAMPLES):
        ql, qr, auxl, auxr, params = random_case(sol.name, rng)
        for ixy in (1, 2):
            wave, s, amdq, apdq = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params)
            assert_written(wave, s, amdq, apdq)
            u_edge = auxr[ixy - 1]
            assert s[0] == u_edge
            np.testing.assert_allclose(amdq + apdq, u_edge * (qr - ql), rtol=1e-14)
            assert amdq[0] == min(u_edge, 0.0) * (qr[0] - ql[0])
            assert apdq[0] == max(u_edge, 0.0) * (qr[0] - ql[0])


def test_advection_upwinding():
    params = advection.params_array({"u": 2.0, "v": -3.0})
    ql, qr = np.array([1.0]), np.array([4.0])
    aux = np.zeros(1)
    _, s, amdq, apdq = call_rpn2(advection, 1, ql, qr, aux, aux, params)
    assert (s[0], amdq[0], apdq[0]) == (2.0, 0.0, 6.0)
    _, s, amdq, apdq = call_rpn2(advection, 2, ql, qr, aux, aux, params)
    assert (s[0], amdq[0], apdq[0]) == (-3.0, -9.0, 0.0)


# --------------------------------------------------------------------------- (b) equal states


@pytest.mark.parametrize("name", sorted(ALL))
def test_equal_states_give_zero(name):
    sol = ALL[name]
    rng = np.random.default_rng(3)
    for _ in range(NSAMPLES // 2):
        ql, _, auxl, auxr, params = random_case(name, rng)
        for ixy in (1, 2):
            wave, s, amdq, apdq = call_rpn2(sol, ixy, ql, ql.copy(), auxl, auxr, params)
            assert_written(wave, s, amdq, apdq)
            assert np.all(wave == 0.0)
            assert np.all(amdq == 0.0)
            assert np.all(apdq == 0.0)


# --------------------------------------------------------------------------- (c) wave sum


@pytest.mark.parametrize("name", sorted(ALL))
def test_waves_sum_to_jump(name):
    sol = ALL[name]
    rng = np.random.default_rng(4)
    for _ in range(NSAMPLES):
        ql, qr, auxl, auxr, params = random_case(name, rng)
        for ixy in (1, 2):
            wave, _, _, _ = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params)
            total = wave.sum(axis=1)
            jump = qr - ql
            scale = np.abs(ql).max() + np.abs(qr).max()
            if name == "acoustics":
                # the tangential-velocity jump is a stationary wave with no fluctuation,
                # not one of the two acoustic waves
                mt = 3 - ixy
                assert np.all(wave[mt] == 0.0)
                keep = [0, ixy]
                np.testing.assert_allclose(total[keep], jump[keep], atol=1e-13 * scale)
            else:
                np.testing.assert_allclose(total, jump, rtol=0, atol=1e-13 * scale)


# --------------------------------------------------------------------------- (d) rotation


@pytest.mark.parametrize("name", SYSTEMS)
def test_rotational_consistency(name):
    sol = ALL[name]
    rng = np.random.default_rng(5)
    aux = np.zeros(1)
    for _ in range(NSAMPLES // 2):
        ql, qr, _, _, params = random_case(name, rng)
        wx, sx, amx, apx = call_rpn2(sol, 1, ql, qr, aux, aux, params)
        wy, sy, amy, apy = call_rpn2(sol, 2, swap(ql), swap(qr), aux, aux, params)
        np.testing.assert_allclose(sy, sx, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(wy, swap(wx), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(amy, swap(amx), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(apy, swap(apx), rtol=1e-14, atol=1e-15)
        asdq = rng.uniform(-1.0, 1.0, sol.num_eqn)
        for imp in (1, 2):
            bmx, bpx = call_rpt2(sol, 1, imp, ql, qr, aux, aux, aux, params, asdq)
            bmy, bpy = call_rpt2(sol, 2, imp, swap(ql), swap(qr), aux, aux, aux, params, swap(asdq))
            np.testing.assert_allclose(bmy, swap(bmx), rtol=1e-14, atol=1e-15)
            np.testing.assert_allclose(bpy, swap(bpx), rtol=1e-14, atol=1e-15)


def test_advection_rotational_consistency():
    rng = np.random.default_rng(6)
    aux = np.zeros(1)
    for _ in range(10):
        ql, qr, _, _, params = random_case("advection", rng)
        out_x = call_rpn2(advection, 1, ql, qr, aux, aux, params)
        out_y = call_rpn2(advection, 2, ql, qr, aux, aux, params[::-1].copy())
        for a, b in zip(out_x, out_y):
            np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- (e) transverse


def numerical_split(b_matrix, asdq):
    """B^- asdq and B^+ asdq from a numpy eigen-decomposition of B."""
    lam, r = np.linalg.eig(b_matrix)
    coef = np.linalg.solve(r, asdq)
    minus = (r * np.minimum(lam, 0.0)) @ coef
    plus = (r * np.maximum(lam, 0.0)) @ coef
    return np.real_if_close(minus), np.real_if_close(plus)


@pytest.mark.parametrize("name", SYSTEMS)
def test_transverse_split_matches_roe_matrix(name):
    sol = ALL[name]
    rng = np.random.default_rng(7)
    aux = np.zeros(1)
    for _ in range(NSAMPLES // 2):
        ql, qr, _, _, params = random_case(name, rng)
        for ixy in (1, 2):
            qhat = roe_state(name, ql, qr, params)
            b_matrix = jacobian(name, qhat, 3 - ixy, params)
            _, _, amdq, apdq = call_rpn2(sol, ixy, ql, qr, aux, aux, params)
            for imp, asdq in ((1, amdq), (2, apdq), (1, rng.uniform(-1, 1, sol.num_eqn))):
                bm, bp = call_rpt2(sol, ixy, imp, ql, qr, aux, aux, aux, params, asdq)
                assert_written(bm, bp)
                scale = np.abs(b_matrix).max() * np.abs(asdq).max() + 1e-300
                np.testing.assert_allclose(bm + bp, b_matrix @ asdq, rtol=0, atol=1e-12 * scale)
                nm, np_ = numerical_split(b_matrix, asdq)
                np.testing.assert_allclose(bm, nm, rtol=0, atol=1e-10 * scale)
                np.testing.assert_allclose(bp, np_, rtol=0, atol=1e-10 * scale)


def test_transverse_advection_exact():
    params = advection.params_array({"u": 0.7, "v": -0.4})
    aux = np.zeros(1)
    q = np.zeros(1)
    asdq = np.array([3.0])
    bm, bp = call_rpt2(advection, 1, 1, q, q, aux, aux, aux, params, asdq)
    assert (bm[0], bp[0]) == (-0.4 * 3.0, 0.0)
    bm, bp = call_rpt2(advection, 2, 2, q, q, aux, aux, aux, params, asdq)
    assert (bm[0], bp[0]) == (0.0, 0.7 * 3.0)


def test_transverse_color_equation_uses_cell_edge_velocities():
    sol = advection_variable
    q = np.zeros(1)
    asdq = np.array([2.0])
    # aux = (u at left edge, v at bottom edge); aux1 is the neighbour below/left
    aux1 = np.array([50.0, 60.0])  # must not be used
    aux2 = np.array([-0.3, -0.5])  # the cell receiving asdq
    aux3 = np.array([0.8, 0.9])  # the neighbour above/right
    for imp in (1, 2):
        bm, bp = call_rpt2(sol, 1, imp, q, q, aux1, aux2, aux3, np.zeros(1), asdq)
        assert (bm[0], bp[0]) == (-0.5 * 2.0, 0.9 * 2.0)
        bm, bp = call_rpt2(sol, 2, imp, q, q, aux1, aux2, aux3, np.zeros(1), asdq)
        assert (bm[0], bp[0]) == (-0.3 * 2.0, 0.8 * 2.0)
    # outflow-only edges: positive bottom velocity, negative top velocity give zero
    bm, bp = call_rpt2(sol, 1, 1, q, q, aux1, -aux2, -aux3, np.zeros(1), asdq)
    assert (bm[0], bp[0]) == (0.0, 0.0)
    rng = np.random.default_rng(8)
    for _ in range(NSAMPLES):
        a1, a2, a3 = (rng.uniform(-1, 1, 2) for _ in range(3))
        asdq = rng.uniform(-1, 1, 1)
        for ixy in (1, 2):
            k = 2 - ixy
            bm, bp = call_rpt2(sol, ixy, 1, q, q, a1, a2, a3, np.zeros(1), asdq)
            assert bm[0] == min(a2[k], 0.0) * asdq[0]
            assert bp[0] == max(a3[k], 0.0) * asdq[0]


def test_transverse_acoustics_exact():
    params = acoustics.params_array({"rho": 2.0, "bulk": 8.0})  # c = 2, Z = 4
    aux = np.zeros(1)
    q = np.zeros(3)
    asdq = np.array([4.0, 7.0, 0.0])  # a pure up-going wave (Z, ., 1) in y ... plus u
    bm, bp = call_rpt2(acoustics, 1, 1, q, q, aux, aux, aux, params, asdq)
    # the asdq[1] (normal velocity) is not moved transversally; p = 4 with v = 0 splits
    # into down-going (-Z, 0, 1) * -0.5 and up-going (Z, 0, 1) * 0.5
    np.testing.assert_allclose(bm, [-2.0 * -0.5 * -4.0, 0.0, -2.0 * -0.5])
    np.testing.assert_allclose(bp, [2.0 * 0.5 * 4.0, 0.0, 2.0 * 0.5])


# --------------------------------------------------------------------------- (f) numba


@pytest.mark.parametrize("name", sorted(ALL))
def test_numba_compiles_and_matches_python(name):
    sol = ALL[name]
    rpn2_jit, rpt2_jit = compiled(sol)
    rng = np.random.default_rng(9)
    for _ in range(10):
        ql, qr, auxl, auxr, params = random_case(name, rng)
        aux3 = rng.uniform(-1.5, 1.5, auxl.shape[0])
        for ixy in (1, 2):
            ref = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params)
            out = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params, fn=rpn2_jit)
            for a, b in zip(out, ref):
                assert_written(a)
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
            for imp, asdq in ((1, ref[2]), (2, ref[3])):
                ref_t = call_rpt2(sol, ixy, imp, ql, qr, auxl, auxr, aux3, params, asdq)
                out_t = call_rpt2(
                    sol, ixy, imp, ql, qr, auxl, auxr, aux3, params, asdq, fn=rpt2_jit
                )
                for a, b in zip(out_t, ref_t):
                    assert_written(a)
                    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize(
    ("sol", "bad"),
    [
        (shallow_roe, np.array([-0.1, 0.0, 0.0])),
        (shallow_hlle, np.array([-0.1, 0.0, 0.0])),
        (euler, np.array([-0.5, 0.0, 0.0, 1.0])),
        (euler, np.array([1.0, 2.0, 0.0, 0.1])),  # negative pressure
    ],
)
def test_non_physical_state_gives_nan_without_raising(sol, bad):
    good = {3: np.array([1.0, 0.2, 0.1]), 4: np.array([1.0, 0.2, 0.1, 2.5])}[sol.num_eqn]
    params = sol.params_array()
    aux = np.zeros(1)
    rpn2_jit, rpt2_jit = compiled(sol)
    for fn, fnt in ((None, None), (rpn2_jit, rpt2_jit)):
        for ql, qr in ((good, bad), (bad, good)):
            wave, s, amdq, apdq = call_rpn2(sol, 1, ql, qr, aux, aux, params, fn=fn)
            assert np.all(np.isnan(amdq)) and np.all(np.isnan(apdq))
            assert np.all(np.isnan(wave)) and np.all(np.isnan(s))
            bm, bp = call_rpt2(
                sol, 2, 1, ql, qr, aux, aux, aux, params, np.ones(sol.num_eqn), fn=fnt
            )
            assert np.all(np.isnan(bm)) and np.all(np.isnan(bp))


@pytest.mark.parametrize("sol", [shallow_roe, shallow_hlle])
def test_shallow_dry_states_do_not_raise(sol):
    params = sol.params_array()
    aux = np.zeros(1)
    wet, dry = np.array([1.0, 0.3, -0.2]), np.zeros(3)
    rpn2_jit, rpt2_jit = compiled(sol)
    for fn in (None, rpn2_jit):
        for ql, qr in ((wet, dry), (dry, wet)):
            wave, s, amdq, apdq = call_rpn2(sol, 1, ql, qr, aux, aux, params, fn=fn)
            assert_written(wave, s, amdq, apdq)
            fl = flux(sol.name, wet, 1, params) * (1.0 if ql is dry else -1.0)
            np.testing.assert_allclose(amdq + apdq, fl, atol=1e-14)
        wave, s, amdq, apdq = call_rpn2(sol, 1, dry, dry, aux, aux, params, fn=fn)
        assert np.all(wave == 0.0) and np.all(amdq == 0.0) and np.all(apdq == 0.0)


# --------------------------------------------------------------------------- (g) entropy fix


def _plain_roe_amdq(wave, s):
    return wave @ np.minimum(s, 0.0)


@pytest.mark.parametrize(
    ("sol", "ql", "qr"),
    [
        # 1-rarefaction from a left state with lambda_1 < 0 into a supercritical
        # right state: the Roe 1-speed is positive but the rarefaction is transonic
        (shallow_roe, np.array([1.0, 0.5, 0.0]), np.array([0.2, 0.2 * 2.0056, 0.1])),
        (shallow_roe, np.array([1.0, 0.0, 0.3]), np.array([0.2, 0.2 * 1.1056, -0.2])),
        (
            euler,
            np.array([1.0, 0.5, 0.2, 1.0 / 0.4 + 0.5 * (0.25 + 0.04)]),
            np.array([0.125, 0.125 * 2.0, 0.0, 0.1 / 0.4 + 0.5 * 0.125 * 4.0]),
        ),
    ],
)
def test_entropy_fix_transonic_rarefaction(sol, ql, qr):
    params = sol.params_array()
    aux = np.zeros(1)
    for ixy, a, b in ((1, ql, qr), (2, swap(ql), swap(qr))):
        wave, s, amdq, apdq = call_rpn2(sol, ixy, a, b, aux, aux, params)
        plain = _plain_roe_amdq(wave, s)
        assert np.abs(amdq - plain).max() > 1e-3, "entropy fix did not act"
        fl, fr = flux(sol.name, a, ixy, params), flux(sol.name, b, ixy, params)
        np.testing.assert_allclose(amdq + apdq, fr - fl, rtol=0, atol=1e-13)
        # the characteristic speed really crosses zero across the 1-wave
        if sol is shallow_roe:
            g = params[0]
            h1 = a[0] + wave[0, 0]
            lam_l = a[ixy] / a[0] - np.sqrt(g * a[0])
            lam_r = (a[ixy] + wave[ixy, 0]) / h1 - np.sqrt(g * h1)
            assert lam_l < 0.0 < lam_r
        rpn2_jit, _ = compiled(sol)
        out = call_rpn2(sol, ixy, a, b, aux, aux, params, fn=rpn2_jit)
        np.testing.assert_allclose(out[2], amdq, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("sol", [shallow_roe, euler])
def test_entropy_fix_inactive_without_sonic_point(sol):
    """Away from sonic points the fluctuations are the plain Roe ones."""
    aux = np.zeros(1)
    params = sol.params_array()
    gm1 = params[0] - 1.0
    # subsonic, weak jump at rest: lambda_1 < 0 and lambda_3 > 0 on both sides
    if sol is shallow_roe:
        ql, qr = np.array([1.0, 0.05, 0.1]), np.array([1.1, -0.02, 0.3])
    else:
        ql = np.array([1.0, 0.05, 0.1, 1.0 / gm1 + 0.5 * (0.0025 + 0.01)])
        qr = np.array([1.1, -0.02, 0.3, 1.2 / gm1 + 0.5 * (0.0004 + 0.09) / 1.1])
    wave, s, amdq, apdq = call_rpn2(sol, 1, ql, qr, aux, aux, params)
    np.testing.assert_allclose(amdq, _plain_roe_amdq(wave, s), atol=1e-15)
    # supersonic: everything goes one way
    for sign in (1.0, -1.0):
        if sol is shallow_roe:
            ql = np.array([1.0, sign * 3.0, 0.5])
            qr = np.array([1.3, sign * 1.3 * 3.2, -0.2])
        else:
            ql = np.array([1.0, sign * 3.0, 0.5, 1.0 / gm1 + 0.5 * (9.0 + 0.25)])
            qr = np.array([1.2, sign * 1.2 * 3.1, 0.0, 1.2 / gm1 + 0.5 * 1.2 * 3.1**2])
        wave, s, amdq, apdq = call_rpn2(sol, 1, ql, qr, aux, aux, params)
        np.testing.assert_allclose(amdq, _plain_roe_amdq(wave, s), atol=1e-14)
        df = flux(sol.name, qr, 1, params) - flux(sol.name, ql, 1, params)
        if sign > 0:
            assert np.all(amdq == 0.0)
            np.testing.assert_allclose(apdq, df, atol=1e-13)
        else:
            assert np.all(apdq == 0.0)
            np.testing.assert_allclose(amdq, df, atol=1e-13)


# --------------------------------------------------------------------------- walls


@pytest.mark.parametrize("name", SYSTEMS)
def test_wall_reflect_mirror_state_blocks_normal_flow(name):
    """A mirror ghost state (``wall_reflect`` components negated) gives a wall.

    The interface value of the flux ``f(ql) + amdq`` then has no mass (or energy, or
    for acoustics no ``K u``) flux through the wall.
    """
    sol = ALL[name]
    rng = np.random.default_rng(11)
    aux = np.zeros(1)
    for _ in range(NSAMPLES // 2):
        q, _, _, _, params = random_case(name, rng)
        for ixy in (1, 2):
            mirror = q.copy()
            for m in sol.wall_reflect[ixy - 1]:
                mirror[m] = -mirror[m]
            _, _, amdq, _ = call_rpn2(sol, ixy, q, mirror, aux, aux, params)
            f_wall = flux(name, q, ixy, params) + amdq
            scale = np.abs(flux(name, q, ixy, params)).max() + 1.0
            np.testing.assert_allclose(f_wall[0], 0.0, atol=1e-12 * scale)
            if name == "euler":
                np.testing.assert_allclose(f_wall[3], 0.0, atol=1e-12 * scale)


@pytest.mark.parametrize("name", sorted(ALL))
def test_compiles_with_kernel_options(name):
    """The step kernels compile with ``error_model='numpy'`` and no bounds checks."""
    sol = ALL[name]
    opts = {"error_model": "numpy", "boundscheck": False, "fastmath": False, "nogil": True}
    rpn2 = numba.njit(**opts)(sol.rpn2)
    rpt2 = numba.njit(**opts)(sol.rpt2)
    rng = np.random.default_rng(12)
    ql, qr, auxl, auxr, params = random_case(name, rng)
    for ixy in (1, 2):
        ref = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params)
        out = call_rpn2(sol, ixy, ql, qr, auxl, auxr, params, fn=rpn2)
        for a, b in zip(out, ref):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
        ref_t = call_rpt2(sol, ixy, 2, ql, qr, auxl, auxr, auxl, params, ref[3])
        out_t = call_rpt2(sol, ixy, 2, ql, qr, auxl, auxr, auxl, params, ref[3], fn=rpt2)
        for a, b in zip(out_t, ref_t):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
