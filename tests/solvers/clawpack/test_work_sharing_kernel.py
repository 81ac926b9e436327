"""The CPU step kernel on the work-sharing contract (issue 32) against the same kernel
calling the composed ``rpn2``/``rpt2`` (``work_sharing=False``): bitwise equal on
random patches (every order / transverse option, dry cells, bottoms) and on whole demo
runs.  Together with ``tests/extensions/riemann/test_work_sharing.py`` (the composed
solvers equal the solvers as they were before the contract, bitwise) this shows that
the kernel computes what it computed before, bit for bit.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from forestpy.extensions.geoclaw.riemann import geoclaw
from forestpy.extensions.riemann import shallow_roe
from forestpy.solvers.clawpack import LIMITERS, make_step_kernel
from forestpy.solvers.clawpack.step_kernel import work_sharing_default
from testsupport import load_demo


def random_patches(solver, mx, my, mbc, npatch, seed):
    """Shallow-water states with dry cells (and, for GeoClaw, a random bottom with
    dry land above the water and cells near the dry tolerance)."""
    rng = np.random.default_rng(seed)
    shape = (npatch, my + 2 * mbc, mx + 2 * mbc)
    h = rng.uniform(0.2, 2.0, shape)
    h[rng.random(shape) < 0.1] = 0.0
    q = np.stack([h, h * rng.normal(0.0, 0.8, shape), h * rng.normal(0.0, 0.8, shape)], axis=1)
    aux = np.zeros((npatch, solver.num_aux) + shape[1:])
    if solver.num_aux:
        aux[:, 0] = rng.normal(-1.0, 0.7, shape)
        eta = 0.0
        q[:, 0] = np.maximum(0.0, eta - aux[:, 0]) * rng.uniform(0.8, 1.2, shape)
        q[:, 0][rng.random(shape) < 0.05] = 1e-3 * rng.uniform(0.5, 1.5)
        q[:, 1:] *= (q[:, 0] > 0)[:, None]
    dx = rng.uniform(0.05, 0.1, npatch)
    dy = rng.uniform(0.05, 0.1, npatch)
    return q, aux, dx, dy


def step(kernel, solver, q, aux, dx, dy, dt, mbc, mx, my):
    npatch = q.shape[0]
    codes = np.full(solver.num_waves, LIMITERS["mc"], dtype=np.int64)
    qn = np.zeros_like(q)
    cfl = np.zeros(npatch)
    edge = np.zeros((npatch, 4, solver.num_eqn, max(mx, my)))
    kernel(q, mbc, aux, qn, dx, dy, dt, solver.params_array(), codes, cfl, edge)
    return qn, cfl, edge


def compare_kernels(solver, options, mx=7, my=5, mbc=2, npatch=6, seed=0):
    q, aux, dx, dy = random_patches(solver, mx, my, mbc, npatch, seed)
    speed = np.nanmax(np.abs(q[:, 1:]) / np.maximum(q[:, :1], 1e-3)) + np.sqrt(
        9.81 * q[:, 0].max())
    dt = 0.8 * min(dx.min(), dy.min()) / speed
    nonzero = 0
    for order, tw in options:
        out = []
        for shared in (True, False):
            kernel = make_step_kernel(solver, order=order, transverse_waves=tw,
                                      work_sharing=shared)
            out.append(step(kernel, solver, q, aux, dx, dy, dt, mbc, mx, my))
        for a, b in zip(*out):
            assert a.tobytes() == b.tobytes(), (solver.name, order, tw)
        nonzero += np.count_nonzero(out[0][0][:, :, mbc:-mbc, mbc:-mbc]
                                    != q[:, :, mbc:-mbc, mbc:-mbc])
    assert nonzero > 0.5 * len(options) * npatch * mx * my  # the states did change


def test_work_sharing_is_on_by_default(monkeypatch):
    assert work_sharing_default()
    monkeypatch.setenv("FORESTPY_WORK_SHARING", "0")
    assert not work_sharing_default()


def test_kernel_with_and_without_work_sharing_bitwise_shallow_roe():
    compare_kernels(shallow_roe, [(2, 2), (2, 1), (1, 1), (2, 0)])


# one more compilation of the step kernel (the one without work sharing)
@pytest.mark.slow
def test_kernel_with_and_without_work_sharing_bitwise_geoclaw():
    compare_kernels(geoclaw, [(2, 2), (2, 1), (1, 0)], seed=1)


def _digest(sim):
    """Hash of the interiors (ghost cells outside the domain's corners are never set)."""
    b = sim.mbc
    return hashlib.sha256(np.ascontiguousarray(sim.q[:, :, b:-b, b:-b]).tobytes()).hexdigest()


DEMOS = {
    "radial_dam": ("radial_dam", dict(mx=16, min_level=2, max_level=3, t_final=0.5)),
    "bowl_radial": ("geoclaw/bowl_radial", dict(min_level=2, max_level=3, t_final=2.0)),
    "okushiri": ("geoclaw/okushiri", dict(dx_finest=0.112, mx=4, max_level=2, t_final=3.0)),
}


# whole adaptive runs (regrids, ghost fill, time sync, sources), twice each; HLLE's pieces
# are checked pointwise (test_work_sharing.py), not here: two more kernel compilations
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DEMOS))
def test_demo_runs_with_and_without_work_sharing_bitwise(name, monkeypatch):
    module, options = DEMOS[name]
    demo = load_demo(module)
    digests = []
    for flag in ("1", "0"):
        monkeypatch.setenv("FORESTPY_WORK_SHARING", flag)
        sim = demo.setup(**options).run()
        assert sim.steps > 5
        digests.append(_digest(sim))
    assert digests[0] == digests[1]
