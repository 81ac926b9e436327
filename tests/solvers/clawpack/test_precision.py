"""Working precision (issue 32, item 4): the solvers' sources compiled with FP32
literals compute in FP32; the GPU step kernel in ``float32`` and ``mixed`` precision
against the FP64 kernel, and mixed precision conserving to FP64 round-off.

The kernels run in Numba's CUDA simulator here (conftest.py); on a GPU machine with
``NUMBA_ENABLE_CUDASIM=0`` on the device.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from forestpy.solvers.clawpack import LIMITERS
from forestpy.solvers.clawpack.gpu_kernel import make_gpu_step_kernel, plan_tiles

from forestpy.precision import check_precision, float64_variables, in_precision, with_literals
from forestpy.vtable import get_riemann

SOLVERS = ["shallow_roe", "shallow_hlle", "geoclaw"]
EPS = 0.25


def _states(rs, n, seed, dtype):
    """``n`` random interface problems: wet, dry, nearly dry and transonic states."""
    rng = np.random.default_rng(seed)
    meqn, maux = rs.num_eqn, max(rs.num_aux, 1)
    ql = rng.uniform(-1.0, 1.0, (n, meqn))
    qr = rng.uniform(-1.0, 1.0, (n, meqn))
    ql[:, 0] = rng.uniform(0.0, 2.0, n)
    qr[:, 0] = rng.uniform(0.0, 2.0, n)
    ql[::7, 0] = 0.0  # dry
    qr[::5, :] = 0.0
    ql[1::11, 1] = 3.0 * ql[1::11, 0]  # supercritical
    aux = rng.uniform(-0.2, 0.2, (n, maux))
    return ql.astype(dtype), qr.astype(dtype), aux.astype(dtype)


def _normal(rpn2, rs, ql, qr, aux, dtype, ixy=1):
    meqn, mw = rs.num_eqn, rs.num_waves
    params = rs.params_array().astype(dtype)
    out = np.zeros((len(ql), 2, meqn))
    f = numba.njit(rpn2) if not isinstance(rpn2, numba.core.registry.CPUDispatcher) else rpn2
    wave, s = np.zeros((meqn, mw), dtype), np.zeros(mw, dtype)
    am, ap = np.zeros(meqn, dtype), np.zeros(meqn, dtype)
    for k in range(len(ql)):
        f(ixy, ql[k], qr[k], aux[k], aux[(k + 1) % len(ql)], params, wave, s, am, ap)
        out[k, 0], out[k, 1] = am, ap
    return f, out


@pytest.mark.parametrize("name", SOLVERS)
def test_float32_build_of_a_solver_computes_in_float32(name):
    """Every float literal of the solver (and of the helpers it calls) follows the
    working precision: no variable of the FP32 build is float64, while the FP64 source
    given the same FP32 arrays computes in float64 (what the check would catch); the
    results agree with FP64 to FP32 round-off."""
    rs = get_riemann(name)
    ql, qr, aux = _states(rs, 64, 0, np.float32)
    f32, got = _normal(in_precision(rs.rpn2, np.float32), rs, ql, qr, aux, np.float32)
    assert float64_variables(f32) == []
    f64, _ = _normal(numba.njit(rs.rpn2.py_func if hasattr(rs.rpn2, "py_func") else rs.rpn2),
                     rs, ql, qr, aux, np.float32)
    assert float64_variables(f64), "the check finds float64 arithmetic in the FP64 source"
    _, ref = _normal(rs.rpn2, rs, ql.astype(np.float64), qr.astype(np.float64),
                     aux.astype(np.float64), np.float64)
    scale = np.abs(ref).max(axis=(1, 2), keepdims=True) + 1.0
    assert np.all(np.isfinite(got))
    assert np.abs(got - ref).max() / scale.max() < 1e-5

    meqn = rs.num_eqn
    t32 = in_precision(rs.rpt2, np.float32)
    params = rs.params_array().astype(np.float32)
    asdq = np.linspace(-0.5, 0.5, meqn).astype(np.float32)
    bm, bp = np.zeros(meqn, np.float32), np.zeros(meqn, np.float32)
    t32(1, 2, ql[1], qr[1], aux[0], aux[1], aux[2], params, asdq, bm, bp)
    assert float64_variables(t32) == []


def _probe(x):
    return 0.5 * x + math.pi - float(1) + SCALE


SCALE = 0.1


def test_with_literals_retypes_literals_constants_and_float_calls():
    g = numba.njit(with_literals(_probe, np.float32))
    r = g(np.float32(2.0))  # boxed as a Python float
    assert float64_variables(g) == []
    assert r == np.float32(np.float32(1.0) + np.float32(math.pi) - np.float32(1.0)
                           + np.float32(0.1))
    assert with_literals(_probe, np.float64) is _probe
    with pytest.raises(ValueError, match="float64 or float32"):
        with_literals(_probe, np.float16)


def test_unknown_precision_is_one_clear_error():
    assert check_precision(None) == "float64"
    with pytest.raises(ValueError, match="unknown precision 'half'"):
        check_precision("half")


def _periodic_patch(rs, mx, mbc, seed, dtype):
    """One patch whose ghost cells wrap around (a periodic domain of one patch): every
    face's fluctuations stay inside, so the totals are conserved to round-off."""
    rng = np.random.default_rng(seed)
    x = (np.arange(mx) + 0.5) / mx
    X, Y = np.meshgrid(x, x)
    h = 1.0 + 0.3 * np.exp(-30 * ((X - 0.4) ** 2 + (Y - 0.6) ** 2)) + 0.01 * rng.random(X.shape)
    q = np.stack([h, 0.2 * h * np.sin(2 * np.pi * Y), -0.1 * h * np.cos(2 * np.pi * X)])
    q = np.pad(q, ((0, 0), (mbc, mbc), (mbc, mbc)), mode="wrap")[None]
    return q.astype(dtype)


def _step(rs, q, precision, mbc, dt=0.004, dx=0.05):
    npatch, meqn, ny, nx = q.shape
    mx = nx - 2 * mbc
    kernel, nt = make_gpu_step_kernel(rs, mx, mx, mbc, precision=precision)
    qn = np.full_like(q, np.nan)
    cfl = np.full(npatch, np.nan)
    edge = np.full((npatch, 4, meqn, mx), np.nan)
    codes = np.full(rs.num_waves, LIMITERS["mc"], dtype=np.int64)
    aux = np.zeros((npatch, 1, ny, nx), q.dtype)
    kernel[npatch, nt](np.arange(npatch, dtype=np.int64), q, aux, qn, np.full(npatch, dx),
                       np.full(npatch, dx), dt, rs.params_array(), codes, cfl, edge)
    return qn[:, :, mbc:-mbc, mbc:-mbc], cfl


def test_kernel_precisions_against_float64_and_mass_conservation():
    """float32 and mixed agree with the FP64 kernel to FP32 round-off; the FP64 and the
    mixed kernel conserve each component to FP64 round-off (their fluctuations and
    update are FP64; the FP32 transverse terms enter both cells they move between), the
    float32 kernel to FP32 round-off."""
    rs = get_riemann("shallow_roe")
    mx, mbc = 8, 2
    q64 = _periodic_patch(rs, mx, mbc, 0, np.float64)
    inner = q64[:, :, mbc:-mbc, mbc:-mbc]
    ref, cref = _step(rs, q64, "float64", mbc)
    out = {}
    for p, q in (("float64", q64), ("mixed", q64), ("float32", q64.astype(np.float32))):
        got, cfl = _step(rs, q, p, mbc)
        assert np.all(np.isfinite(got)), p
        assert got.dtype == q.dtype
        change = np.abs(got.astype(np.float64) - ref).max() / np.abs(ref - inner).max()
        drift = np.abs(got.astype(np.float64).sum(axis=(2, 3))
                        - q[:, :, mbc:-mbc, mbc:-mbc].astype(np.float64).sum(axis=(2, 3)))
        out[p] = (change, drift.max() / np.abs(inner).sum(), abs(cfl[0] - cref[0]) / cref[0])
    assert out["float64"][0] == 0.0
    for p in ("mixed", "float32"):
        assert 0.0 < out[p][0] < 1e-3, (p, out[p])  # of the step's change of q
        assert out[p][2] < 1e-5, (p, out[p])
    assert out["float64"][1] < 1e-15 and out["mixed"][1] < 1e-15, out
    assert out["float32"][1] < 1e-6, out


def test_float32_scratch_makes_taller_tiles():
    r64 = plan_tiles(32, 32, 3, 3, word=8)[0]
    r32 = plan_tiles(32, 32, 3, 3, word=4)[0]
    assert r32 > r64


def test_precision_needs_the_gpu_tile_kernel():
    from forestpy.solvers.clawpack.solver import ClawpackSolver

    rs = get_riemann("shallow_roe")
    with pytest.raises(ValueError, match="needs the GPU backend"):
        ClawpackSolver(rs, precision="mixed")
    with pytest.raises(ValueError, match="unknown precision"):
        ClawpackSolver(rs, precision="fp16")


def test_simulation_precision_float32_implies_float32_storage():
    from forestpy import Simulation

    kw = dict(qinit=lambda x, y: np.stack([1 + 0 * x, 0 * x, 0 * x]), mx=8, min_level=1,
              max_level=1)
    with pytest.raises(ValueError, match="precision='float32' computes on float32 fields"):
        Simulation("shallow_roe", precision="float32", dtype="float64", backend="gpu", **kw)
    with pytest.raises(ValueError, match="needs the GPU backend"):
        Simulation("shallow_roe", precision="mixed", **kw)
