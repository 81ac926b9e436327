"""The CUDA step kernel against the CPU kernel (same Riemann solvers, same options).

Without a GPU these run in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set by
conftest.py), on a few tiny patches; on a machine with a GPU and
``NUMBA_ENABLE_CUDASIM=0`` they run on the device.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from forestpy.solvers.clawpack import LIMITERS, make_fluctuation_kernel, make_step_kernel
from forestpy.solvers.clawpack.gpu_kernel import (
    make_gpu_fluctuation_kernel,
    make_gpu_step_kernel,
    plan_tiles,
)
from fwave_advection import fwave_advection

from forestpy.vtable import get_riemann

if not numba.config.ENABLE_CUDASIM:
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no GPU and the CUDA simulator is off", allow_module_level=True)
    from forestpy.backend import contract_multiply_add

    contract_multiply_add(False)  # as GPUBackend() does: these kernels are made without one


# a user-defined solver in plain Python with no CUDA code (fwave_advection.py): conservative
# advection with cell velocities in aux, in f-wave form, and a capacity
USER = fwave_advection("test_gpu_user_fwave", num_aux=3, field_names=("q",))  # u, v, capacity


def make_data(solver, mx, my, mbc, npatch, seed):
    rng = np.random.default_rng(seed)
    meqn, maux = solver.num_eqn, solver.num_aux
    q = rng.uniform(-0.3, 0.3, (npatch, meqn, my + 2 * mbc, mx + 2 * mbc))
    if solver.name.startswith("shallow"):
        q[:, 0] += 1.5
    if solver.name == "euler":
        q[:, 0] += 1.5
        q[:, 3] += 4.0
    aux = rng.uniform(-1.0, 1.0, (npatch, maux, my + 2 * mbc, mx + 2 * mbc))
    if solver.name == "acoustics":
        aux = rng.uniform(0.5, 2.0, aux.shape)
    if maux:
        aux[:, -1] = rng.uniform(0.5, 1.5, aux[:, -1].shape)  # capacity, when used
    dx = rng.uniform(0.05, 0.1, npatch)
    dy = rng.uniform(0.05, 0.1, npatch)
    return q, aux, dx, dy


def both(solver, mx, my, order, tw, capa, limiter="mc", npatch=2, mbc=2, seed=0,
         shared_bytes=None, dtype=np.float64):
    q, aux, dx, dy = make_data(solver, mx, my, mbc, npatch, seed)
    params = solver.params_array()
    codes = np.full(solver.num_waves, LIMITERS[limiter], dtype=np.int64)
    dt = 0.02
    meqn = solver.num_eqn
    cpu = make_step_kernel(solver, order=order, transverse_waves=tw, capacity_index=capa)
    qc = np.zeros_like(q)
    cc = np.zeros(npatch)
    ec = np.zeros((npatch, 4, meqn, max(mx, my)))
    qs, auxs = q.astype(dtype).astype(np.float64), aux.astype(dtype).astype(np.float64)
    cpu(qs, mbc, auxs, qc, dx, dy, dt, params, codes, cc, ec)
    kw = {} if shared_bytes is None else {"shared_bytes": shared_bytes}
    gpu, nt = make_gpu_step_kernel(solver, mx, my, mbc, order=order, transverse_waves=tw,
                                   capacity_index=capa, **kw)
    qg = np.full(q.shape, np.nan, dtype=dtype)
    cg = np.full(npatch, np.nan)
    eg = np.full((npatch, 4, meqn, max(mx, my)), np.nan)
    rows = np.arange(npatch, dtype=np.int64)
    gpu[npatch, nt](rows, q.astype(dtype), aux.astype(dtype), qg, dx, dy, dt, params, codes, cg,
                    eg)
    b = mbc
    return (qc[:, :, b:-b, b:-b], cc, ec), (qg[:, :, b:-b, b:-b], cg, eg)


def assert_same(cpu, gpu):
    """Bit for bit: the GPU kernel does the CPU kernel's operations in the same order
    (no contracted multiply-adds, see ``forestpy.backend.contract_multiply_add``),
    so that wet/dry switches and refinement flags cannot tip differently."""
    for a, b in zip(cpu, gpu):
        assert np.all(np.isfinite(b)), "the GPU kernel left entries unwritten"
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("order,tw", [(2, 2), (2, 1), (2, 0), (1, 1), (1, 0)])
def test_shallow_roe_all_options(order, tw):
    assert_same(*both(get_riemann("shallow_roe"), 6, 5, order, tw, -1))


@pytest.mark.parametrize("name", ["shallow_hlle", "euler", "acoustics", "advection"])
def test_registered_solvers(name):
    assert_same(*both(get_riemann(name), 5, 6, 2, 2, -1, seed=1))


@pytest.mark.parametrize("limiter", ["none", "minmod", "superbee", "vanleer"])
def test_limiters(limiter):
    assert_same(*both(get_riemann("shallow_roe"), 4, 4, 2, 2, -1, limiter=limiter, seed=2))


@pytest.mark.parametrize("tw", [0, 2])
def test_user_fwave_solver_with_capacity(tw):
    """A Riemann solver defined in this file (no CUDA code) runs on the GPU, with
    f-waves, aux and a capacity function."""
    assert_same(*both(USER, 5, 4, 2, tw, 2, seed=3))


def test_variable_advection_aux():
    assert_same(*both(get_riemann("advection_variable"), 4, 5, 2, 2, -1, seed=4))


def test_row_tiles():
    """Small shared memory forces several row tiles (and a short last tile)."""
    solver = get_riemann("shallow_roe")
    R = plan_tiles(4, 7, 3, 3, True, shared_bytes=5200)[0]
    assert R < 7 and 7 % R != 0
    assert_same(*both(solver, 4, 7, 2, 2, -1, shared_bytes=5200, seed=5))


def test_wide_ghost_frame():
    assert_same(*both(get_riemann("shallow_roe"), 4, 4, 2, 2, -1, mbc=3, seed=6))


def test_float32_storage():
    """float32 fields: the kernel computes in float64 from the rounded inputs."""
    cpu, gpu = both(get_riemann("shallow_roe"), 4, 4, 2, 2, -1, seed=7, dtype=np.float32)
    assert np.abs(cpu[0] - gpu[0]).max() < 1e-6
    assert np.abs(cpu[1] - gpu[1]).max() < 1e-12


def test_plan_tiles_fits_shared_memory():
    for mx in (8, 16, 32):
        R, nt, nslot, slot = plan_tiles(mx, mx, 3, 3)
        assert nslot * slot * 8 <= 46 * 1024 and nt % 32 == 0 and nt <= 512
        assert (R + 2) * (mx + 3) <= nt and (R + 3) * (mx + 2) <= nt and R * mx <= nt


def test_gpu_fluctuations_match_cpu():
    solver = get_riemann("shallow_roe")
    rng = np.random.default_rng(8)
    ql = rng.uniform(0.5, 1.5, (37, 3))
    qr = rng.uniform(0.5, 1.5, (37, 3))
    none = np.zeros((37, 0))
    for ixy in (1, 2):
        a = np.zeros((37, 3))
        b = np.zeros((37, 3))
        make_fluctuation_kernel(solver)(ixy, ql, qr, none, none, solver.params_array(), a)
        make_gpu_fluctuation_kernel(solver)(ixy, ql, qr, none, none, solver.params_array(), b)
        assert np.abs(a - b).max() < 1e-14


def test_rows_list_steps_only_the_listed_patches():
    """``rows``: the listed patches (any order) get the full launch's results; the
    others' entries of qnew, cfl and edge are untouched."""
    solver = get_riemann("shallow_roe")
    mx = my = 4
    mbc, npatch = 2, 3
    q, aux, dx, dy = make_data(solver, mx, my, mbc, npatch, seed=4)
    params = solver.params_array()
    codes = np.full(solver.num_waves, LIMITERS["mc"], dtype=np.int64)
    gpu, nt = make_gpu_step_kernel(solver, mx, my, mbc)
    shape_e = (npatch, 4, solver.num_eqn, max(mx, my))
    full = (np.zeros_like(q), np.zeros(npatch), np.zeros(shape_e))
    gpu[npatch, nt](np.arange(npatch), q, aux, *full[:1], dx, dy, 0.02, params, codes,
                    *full[1:])
    part = (np.full_like(q, np.nan), np.full(npatch, np.nan), np.full(shape_e, np.nan))
    rows = np.array([2, 0], dtype=np.int64)
    gpu[len(rows), nt](rows, q, aux, *part[:1], dx, dy, 0.02, params, codes, *part[1:])
    b = mbc
    for a, c in zip(full, part):
        if a.ndim == 4:
            a, c = a[:, :, b:-b, b:-b], c[:, :, b:-b, b:-b]
        assert np.array_equal(a[rows], c[rows])
        assert np.isnan(c[1]).all()


def test_one_block_per_tile_gives_the_same_results():
    """``block_per_tile`` (small forests): each row tile of a patch its own block, the
    patch's Courant number by its last tile; the results are those of one block per
    patch, and the tickets are back to zero for the next launch."""
    from forestpy.solvers.clawpack.gpu_kernel import tiles_per_patch

    solver = get_riemann("shallow_roe")
    mx, my, mbc, npatch = 4, 7, 2, 3
    q, aux, dx, dy = make_data(solver, mx, my, mbc, npatch, seed=8)
    params = solver.params_array()
    codes = np.full(solver.num_waves, LIMITERS["mc"], dtype=np.int64)
    rows = np.array([2, 0, 1], dtype=np.int64)
    shape_e = (npatch, 4, solver.num_eqn, max(mx, my))
    one, nt = make_gpu_step_kernel(solver, mx, my, mbc, rows_per_tile=3)
    full = (np.zeros_like(q), np.zeros(npatch), np.zeros(shape_e))
    one[npatch, nt](rows, q, aux, full[0], dx, dy, 0.02, params, codes, *full[1:])
    tiled, nt = make_gpu_step_kernel(solver, mx, my, mbc, rows_per_tile=3, block_per_tile=True)
    tiles = tiles_per_patch(solver, mx, my, rows_per_tile=3)
    assert tiles == 3
    tickets = np.zeros(npatch, dtype=np.int32)
    for _ in range(2):
        got = (np.full_like(q, np.nan), np.full(npatch, np.nan), np.full(shape_e, np.nan))
        tiled[npatch * tiles, nt](rows, q, aux, got[0], dx, dy, 0.02, params, codes, *got[1:],
                                  np.full((npatch, tiles), np.nan), tickets)
        b = mbc
        np.testing.assert_array_equal(got[0][:, :, b:-b, b:-b], full[0][:, :, b:-b, b:-b])
        np.testing.assert_array_equal(got[1], full[1])
        np.testing.assert_array_equal(got[2], full[2])
        assert not tickets.any()
