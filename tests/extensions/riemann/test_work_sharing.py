"""The work-sharing contract of the shallow-water solvers (issue 32): the composed
``rpn2``/``rpt2`` equal the solvers as they were before the contract bitwise
(``pointwise_main.py``, a frozen copy), on random states that include dry, nearly dry,
transonic (the sonic point +- a few ulp), invalid (negative, NaN) and extreme ones
(10^5 interfaces of ``shallow_roe`` in the fast suite, 10^6 of each solver in the slow
one); and
the pieces called as the CPU kernel calls them (the cell state of each side, one
interface state for the normal and both transverse solves) equal the compositions.

The kernel-level proof (whole runs with and without work sharing, bitwise) is in
``tests/solvers/clawpack/test_work_sharing_kernel.py``.
"""

import numba
import numpy as np
import pointwise_main as old
import pytest
from forestpy.extensions.geoclaw import riemann as geo
from forestpy.extensions.riemann import shallow_hlle, shallow_roe
from forestpy.solvers.clawpack.step_kernel import jit_pointwise

from forestpy.vtable import RiemannSolver

SOLVERS = {
    "shallow_roe": (shallow_roe, old.rpn2_shallow_roe, old.rpt2_shallow_roe),
    "shallow_hlle": (shallow_hlle, old.rpn2_shallow_hlle, old.rpt2_shallow_hlle),
    "geoclaw": (geo.geoclaw, old.rpn2_geoclaw, old.rpt2_geoclaw),
}
NOUT = 9 + 3 + 3 + 3 + 4 * 3  # wave, s, amdq, apdq, bm/bp for imp = 1, 2


def _ulps(x, rng, k=4):
    """``x`` moved by -k..k ulp at random."""
    steps = rng.integers(-k, k + 1, size=x.shape)
    out = x.copy()
    for _ in range(k):
        move = steps != 0
        out[move] = np.nextafter(out[move], np.where(steps[move] > 0, np.inf, -np.inf))
        steps = steps - np.sign(steps)
    return out


def _depths(rng, n, drytol):
    """Depths: ordinary, zero, around ``drytol``, tiny, huge, negative, NaN."""
    h = rng.uniform(0.0, 3.0, n) ** 2
    kind = rng.integers(0, 20, n)
    h[kind == 0] = 0.0
    h[kind == 1] = -0.0
    h[kind == 2] = _ulps(np.full((kind == 2).sum(), max(drytol, 1e-300)), rng)
    h[kind == 3] = 10.0 ** rng.uniform(-300, -5, (kind == 3).sum())
    h[kind == 4] = 10.0 ** rng.uniform(5, 100, (kind == 4).sum())
    h[kind == 5] = -rng.uniform(0.0, 1.0, (kind == 5).sum())
    h[kind == 6] = np.nan
    h[kind == 7] = 5e-324  # the smallest subnormal
    return h


def random_states(n, grav, drytol, rng):
    """``(ql, qr, auxl, auxr)`` of ``n`` interfaces; about a third of the momenta put a
    side at its sonic point (``|u| = sqrt(g h)`` +- a few ulp), so that the entropy
    fix's transonic branches and their edges are taken."""
    ql = np.empty((n, 3))
    qr = np.empty((n, 3))
    for q in (ql, qr):
        h = _depths(rng, n, drytol)
        c = np.sqrt(np.abs(grav * np.nan_to_num(h)))
        u = rng.normal(0.0, 1.5, n) * c
        sonic = rng.random(n) < 0.3
        u[sonic] = _ulps(np.where(rng.random(sonic.sum()) < 0.5, 1.0, -1.0) * c[sonic], rng)
        q[:, 0] = h
        q[:, 1] = h * u
        q[:, 2] = h * rng.normal(0.0, 1.0, n) * c
        zero = rng.random(n) < 0.05
        q[zero, 1:] = 0.0
    # a fifth of the pairs: a small jump (the Roe state near one cell's state)
    near = rng.random(n) < 0.2
    qr[near] = ql[near] * (1.0 + rng.normal(0.0, 1e-3, (near.sum(), 3)))
    same = rng.random(n) < 0.03
    qr[same] = ql[same]
    auxl = rng.normal(0.0, 1.0, (n, 1))
    auxr = auxl + rng.normal(0.0, 0.5, (n, 1))
    # lakes at rest (one surface, dry sides included) for the GeoClaw solver
    rest = rng.random(n) < 0.1
    ql[rest, 1:] = 0.0
    qr[rest, 1:] = 0.0
    qr[rest, 0] = np.maximum(0.0, ql[rest, 0] + auxl[rest, 0] - auxr[rest, 0])
    return ql, qr, auxl, auxr


def _driver(rpn2, rpt2):
    rpn2 = jit_pointwise(rpn2)
    rpt2 = jit_pointwise(rpt2)

    @numba.njit
    def run(ixy, ql, qr, auxl, auxr, aux1, aux3, params, asdq, nw, out):
        wave = np.empty((3, 3))
        s = np.empty(3)
        amdq = np.empty(3)
        apdq = np.empty(3)
        bm = np.empty(3)
        bp = np.empty(3)
        for k in range(ql.shape[0]):
            wave[:] = np.nan
            s[:] = np.nan
            rpn2(ixy, ql[k], qr[k], auxl[k], auxr[k], params, wave[:, :nw], s[:nw], amdq,
                 apdq)
            o = out[k]
            for m in range(3):
                for p in range(3):
                    o[3 * m + p] = wave[m, p]
                o[9 + m] = s[m]
                o[12 + m] = amdq[m]
                o[15 + m] = apdq[m]
            rpt2(ixy, 1, ql[k], qr[k], aux1[k], auxl[k], aux3[k], params, asdq[k], bm, bp)
            for m in range(3):
                o[18 + m] = bm[m]
                o[21 + m] = bp[m]
            rpt2(ixy, 2, ql[k], qr[k], aux1[k], auxr[k], aux3[k], params, asdq[k], bm, bp)
            for m in range(3):
                o[24 + m] = bm[m]
                o[27 + m] = bp[m]

    return run


def _pieces_driver(solver: RiemannSolver):
    """The pieces called as the CPU kernel calls them: each cell state once, one
    interface state shared by the normal solve and both transverse solves."""
    cell = jit_pointwise(solver.cell_state)
    edge = jit_pointwise(solver.edge_state) if solver.edge_state is not None else None
    rpn2e = jit_pointwise(solver.rpn2e)
    rpt2e = jit_pointwise(solver.rpt2e)
    ncs = solver.num_cell_state
    nes = max(solver.num_edge_state, 1)
    has_edge = edge is not None

    @numba.njit
    def run(ixy, ql, qr, auxl, auxr, aux1, aux3, params, asdq, nw, out):
        wave = np.empty((3, 3))
        s = np.empty(3)
        amdq = np.empty(3)
        apdq = np.empty(3)
        bm = np.empty(3)
        bp = np.empty(3)
        csl = np.empty(ncs)
        csr = np.empty(ncs)
        es = np.zeros(nes)
        for k in range(ql.shape[0]):
            wave[:] = np.nan
            s[:] = np.nan
            t = cell(ql[k], auxl[k], params)
            for m in range(ncs):
                csl[m] = t[m]
            t = cell(qr[k], auxr[k], params)
            for m in range(ncs):
                csr[m] = t[m]
            if has_edge:
                e = edge(ixy, ql[k], qr[k], csl, csr, auxl[k], auxr[k], params)
                for m in range(nes):
                    es[m] = e[m]
            rpn2e(ixy, ql[k], qr[k], csl, csr, auxl[k], auxr[k], params, es, wave[:, :nw],
                  s[:nw], amdq, apdq)
            o = out[k]
            for m in range(3):
                for p in range(3):
                    o[3 * m + p] = wave[m, p]
                o[9 + m] = s[m]
                o[12 + m] = amdq[m]
                o[15 + m] = apdq[m]
            rpt2e(ixy, 1, ql[k], qr[k], csl, csr, aux1[k], auxl[k], aux3[k], params, es,
                  asdq[k], bm, bp)
            for m in range(3):
                o[18 + m] = bm[m]
                o[21 + m] = bp[m]
            rpt2e(ixy, 2, ql[k], qr[k], csl, csr, aux1[k], auxr[k], aux3[k], params, es,
                  asdq[k], bm, bp)
            for m in range(3):
                o[24 + m] = bm[m]
                o[27 + m] = bp[m]

    return run


def _bits(a):
    """The bit patterns of ``a`` with every NaN made one NaN (signed zeros stay
    apart)."""
    b = a.view(np.uint64).copy()
    b[np.isnan(a)] = np.uint64(0x7FF8000000000000)
    return b


_DRIVERS: dict = {}


def compare(name, n, seed):
    solver, rpn2_old, rpt2_old = SOLVERS[name]
    if name not in _DRIVERS:
        _DRIVERS[name] = (_driver(rpn2_old, rpt2_old), _driver(solver.rpn2, solver.rpt2),
                          _pieces_driver(solver))
    drivers = _DRIVERS[name]
    rng = np.random.default_rng(seed)
    params = solver.params_array()
    grav = params[0]
    drytol = params[1] if name == "geoclaw" else 0.0
    ql, qr, auxl, auxr = random_states(n, grav, drytol, rng)
    aux1 = auxl + rng.normal(0.0, 0.5, (n, 1))
    aux3 = auxr + rng.normal(0.0, 0.5, (n, 1))
    asdq = rng.normal(0.0, 1.0, (n, 3)) * rng.choice([1.0, 1e-20, 1e20], (n, 1))
    checked = 0
    for ixy in (1, 2):
        outs = []
        for run in drivers:
            out = np.zeros((n, 30))
            # the slots of missing waves stay NaN in every driver
            run(ixy, ql, qr, auxl, auxr, aux1, aux3, params, asdq, solver.num_waves, out)
            outs.append(_bits(out))
        ref, composed, pieces = outs
        for what, got in (("composed rpn2/rpt2", composed), ("pieces", pieces)):
            bad = np.nonzero((got != ref).any(axis=1))[0]
            assert bad.size == 0, (
                f"{name} {what}, ixy={ixy}: {bad.size} of {n} interfaces differ from the "
                f"frozen solver, first ql={ql[bad[0]]!r} qr={qr[bad[0]]!r} "
                f"auxl={auxl[bad[0]]!r} auxr={auxr[bad[0]]!r}")
        checked += n
    # the sample exercised what it is meant to: invalid, dry and transonic interfaces
    ref_out = outs[0].view(np.float64)
    assert np.isnan(ref_out[:, 12]).mean() > 0.05
    assert (np.nan_to_num(ql[:, 0], nan=1.0) == 0.0).mean() > 0.05
    return checked


# HLLE and GeoClaw in the slow suite only (below): each solver costs three compilations
def test_composed_roe_equals_the_frozen_one_bitwise():
    assert compare("shallow_roe", 50_000, seed=32) == 100_000


# 10^6 interfaces per solver, both directions (2 x 10^6 normal and 4 x 10^6
# transverse solves per solver): a few seconds each once compiled
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_composed_solvers_equal_the_frozen_ones_bitwise_1e6(name):
    assert compare(name, 1_000_000, seed=3232) == 2_000_000


def test_transonic_sample_takes_the_entropy_fix():
    """The random states hit the Harten-Hyman split (a left-going part that is neither
    ``min(s, 0) W`` nor zero), so the bitwise comparison covers it."""
    rng = np.random.default_rng(32)
    ql, qr, auxl, auxr = random_states(20_000, 1.0, 0.0, rng)
    ok = np.isfinite(ql).all(axis=1) & np.isfinite(qr).all(axis=1)
    ok &= (ql[:, 0] > 0) & (qr[:, 0] > 0)
    hl, hr = ql[ok, 0], qr[ok, 0]
    ul, ur = ql[ok, 1] / hl, qr[ok, 1] / hr
    transonic_1 = (ul - np.sqrt(hl) < 0) & (ur - np.sqrt(hr) > 0)
    assert transonic_1.sum() > 100


def test_contract_fields_are_checked():
    base = dict(name="t", num_eqn=3, num_waves=3, rpn2=old.rpn2_shallow_roe,
                rpt2=old.rpt2_shallow_roe)
    with pytest.raises(ValueError, match="missing"):
        RiemannSolver(**base, num_cell_state=5, cell_state=shallow_roe.cell_state)
    with pytest.raises(ValueError, match="num_edge_state"):
        RiemannSolver(**base, num_cell_state=5, cell_state=shallow_roe.cell_state,
                      rpn2e=shallow_roe.rpn2e, rpt2e=shallow_roe.rpt2e,
                      edge_state=shallow_roe.edge_state)
    with pytest.raises(ValueError, match="num_cell_state"):
        RiemannSolver(**base, cell_state=shallow_roe.cell_state, rpn2e=shallow_roe.rpn2e,
                      rpt2e=shallow_roe.rpt2e)
    with pytest.raises(ValueError, match="without the work-sharing"):
        RiemannSolver(**base, num_cell_state=2)
    assert not RiemannSolver(**base).shares_work
    assert shallow_roe.shares_work and shallow_hlle.shares_work and geo.geoclaw.shares_work
