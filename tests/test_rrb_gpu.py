"""RRB-PCG GPU kernels agree with the CPU (in Numba's CUDA simulator without a GPU)."""

import numpy as np
import pytest
from forestpy.solvers import rrb


def _stencil(nx, ny, seed=0):
    rng = np.random.default_rng(seed)
    kx = rng.uniform(0.5, 2.0, (ny, nx))
    ky = rng.uniform(0.5, 2.0, (ny, nx))
    kx[:, -1] = 0.0
    ky[-1, :] = 0.0
    c = 0.2 + kx + ky
    c[:, 1:] += kx[:, :-1]
    c[1:, :] += ky[:-1, :]
    return c, -kx, -ky


@pytest.mark.parametrize("nx,ny,level", [(9, 7, 3)])
def test_gpu_matches_cpu(nx, ny, level):
    st = _stencil(nx, ny)
    b = np.random.default_rng(1).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=level)
    gpu = rrb.RRBSolver(st, level=level, backend="gpu")
    xp = gpu.backend.xp
    # the preconditioner alone
    assert np.allclose(gpu.precondition(b), cpu.precondition(b), rtol=1e-12, atol=1e-13)
    xc, ic = cpu.solve(b, tol=1e-10)
    xg, ig = gpu.solve(xp.asarray(b), tol=1e-10)
    xg = gpu.backend.to_host(xg)
    assert ig["converged"] and ig["iterations"] == ic["iterations"]
    assert np.allclose(ig["history"], ic["history"], rtol=1e-8)
    assert np.abs(xg - xc).max() < 1e-11 * np.abs(xc).max()
    # warm start path
    xw, iw = gpu.solve(xp.asarray(b), x0=xp.asarray(xc), tol=1e-8)
    assert iw["iterations"] <= 1
