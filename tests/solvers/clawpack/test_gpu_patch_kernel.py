"""The whole-patch CUDA step kernel (``gpu_patch_kernel``) against the CPU kernel.

Bit for bit: the kernel does the CPU kernel's operations in the same order (without
contracted multiply-adds), so ``qnew``, the Courant numbers and the edge fluxes are the
same bits.  Without a GPU these run in Numba's CUDA simulator (conftest.py) on a few
small patches; with ``NUMBA_ENABLE_CUDASIM=0`` on a GPU.  The built-in shallow-water,
HLLE and GeoClaw solvers have the work-sharing pieces (``forestpy.vtable``), which
both kernels call by default; the ``work_sharing=False`` kernels call ``rpn2``/``rpt2``.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from forestpy.extensions.riemann.shallow_roe import (
    SHALLOW_WATER,
    cell_state_shallow_roe,
    edge_state_shallow_roe,
    rpn2e_shallow_roe,
    rpt2e_shallow_roe,
)
from forestpy.solvers.clawpack import LIMITERS, make_step_kernel
from forestpy.solvers.clawpack.gpu_patch_kernel import make_gpu_patch_kernel, plan_patch
from fwave_advection import fwave_advection
from test_gpu_kernel import make_data
from test_work_sharing_kernel import random_patches

from forestpy.vtable import RiemannSolver, get_riemann

if not numba.config.ENABLE_CUDASIM:
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no GPU and the CUDA simulator is off", allow_module_level=True)
    from forestpy.backend import contract_multiply_add

    contract_multiply_add(False)  # as GPUBackend() does

USER = fwave_advection("test_gpu_patch_user_fwave", num_aux=3, field_names=("q",))


# Shallow water (Roe) whose rpn2/rpt2 are NOT the compositions of its work-sharing pieces
# (half the left-going fluctuation, no transverse terms): a kernel that calls rpn2/rpt2
# where it should call the pieces gives other numbers than the CPU kernel on the pieces.
def _rpn2_marked(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    csl = cell_state_shallow_roe(ql, auxl, params)
    csr = cell_state_shallow_roe(qr, auxr, params)
    es = edge_state_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params)
    rpn2e_shallow_roe(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq)
    for m in range(3):
        amdq[m] = 0.5 * amdq[m]


def _rpt2_marked(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    for m in range(3):
        bmasdq[m] = 0.0
        bpasdq[m] = 0.0


MARKED = RiemannSolver(
    name="shallow_roe_marked_pieces", num_waves=3, rpn2=_rpn2_marked, rpt2=_rpt2_marked,
    num_cell_state=5, cell_state=cell_state_shallow_roe, num_edge_state=4,
    edge_state=edge_state_shallow_roe, rpn2e=rpn2e_shallow_roe, rpt2e=rpt2e_shallow_roe,
    **SHALLOW_WATER)


# A user solver on the work-sharing contract with aux (velocities, a capacity), whose
# transverse solve reads both cell states and the face state: advection in f-wave form,
# cell state the two fluxes (u q, v q), face state (mean normal speed, flux jump); the
# transverse splitting weighted by the jump of the transverse flux across the face (a
# test solver: what it computes matters less than that every index must be right)
@numba.njit
def _adv_cell_state(q, aux, params):
    return aux[0] * q[0], aux[1] * q[0]


@numba.njit
def _adv_edge_state(ixy, ql, qr, csl, csr, auxl, auxr, params):
    return 0.5 * (auxl[ixy - 1] + auxr[ixy - 1]), csr[ixy - 1] - csl[ixy - 1]


@numba.njit
def _adv_rpn2e(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq):
    f = es[1]
    wave[0, 0] = f
    s[0] = es[0]
    if s[0] < 0.0:
        amdq[0] = f
        apdq[0] = 0.0
    else:
        amdq[0] = 0.0
        apdq[0] = f


@numba.njit
def _adv_rpt2e(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq, bmasdq,
               bpasdq):
    it = 2 - ixy
    vm = 0.5 * (aux1[it] + aux2[it])
    vp = 0.5 * (aux2[it] + aux3[it])
    w = 1.0 + params[0] * (csr[it] - csl[it]) * es[0] + (csl[1 - it] if imp == 1 else
                                                         csr[1 - it])
    bmasdq[0] = min(vm, 0.0) * asdq[0] * w
    bpasdq[0] = max(vp, 0.0) * asdq[0] * w


def _adv_rpn2(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    csl = _adv_cell_state(ql, auxl, params)
    csr = _adv_cell_state(qr, auxr, params)
    es = _adv_edge_state(ixy, ql, qr, csl, csr, auxl, auxr, params)
    _adv_rpn2e(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq)


def _adv_rpt2(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    csl = _adv_cell_state(ql, aux2, params)
    csr = _adv_cell_state(qr, aux2, params)
    es = _adv_edge_state(ixy, ql, qr, csl, csr, aux2, aux2, params)
    _adv_rpt2e(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq, bmasdq,
               bpasdq)


USER_SHARED = RiemannSolver(
    name="test_gpu_patch_user_shared", num_eqn=1, num_waves=1, rpn2=_adv_rpn2,
    rpt2=_adv_rpt2, num_aux=3, fwave=True, field_names=("q",), param_names=("k",),
    default_params={"k": 0.25}, num_cell_state=2, cell_state=_adv_cell_state,
    num_edge_state=2, edge_state=_adv_edge_state, rpn2e=_adv_rpn2e, rpt2e=_adv_rpt2e)


def geoclaw_data(mx, my, mbc, npatch, seed):
    """Shallow water over a random bottom with dry cells (depth 0), shore cells and a
    wet sea, for the GeoClaw solver (aux 0 = bottom)."""
    rng = np.random.default_rng(seed)
    shape = (npatch, 1, my + 2 * mbc, mx + 2 * mbc)
    bottom = rng.uniform(-1.0, 0.4, shape)
    eta = rng.uniform(-0.05, 0.05, shape)
    h = np.maximum(eta - bottom, 0.0)
    h[rng.random(shape) < 0.1] = 0.0
    u = rng.uniform(-0.5, 0.5, shape) * (h > 0)
    v = rng.uniform(-0.5, 0.5, shape) * (h > 0)
    q = np.concatenate([h, h * u, h * v], axis=1)
    return q, bottom, rng.uniform(0.05, 0.1, npatch), rng.uniform(0.05, 0.1, npatch)


def run_both(solver, mx, my, order=2, tw=2, capa=-1, limiter="mc", npatch=2, mbc=2, seed=0,
             data=None, rows=None, status=False, work_sharing=True, **kw):
    """``(cpu, gpu)`` results ``(qnew interior, cfl, edge)`` of one step (and the
    kernel); ``rows`` steps only those patches on the GPU; ``work_sharing`` for both
    kernels."""
    q, aux, dx, dy = data or make_data(solver, mx, my, mbc, npatch, seed)
    params = solver.params_array()
    codes = np.full(solver.num_waves, LIMITERS[limiter], dtype=np.int64)
    dt = 0.02 if solver.name != "geoclaw" else 0.005
    meqn = solver.num_eqn
    cpu = make_step_kernel(solver, order=order, transverse_waves=tw, capacity_index=capa,
                           work_sharing=work_sharing)
    qc = np.zeros_like(q)
    cc = np.zeros(npatch)
    ec = np.zeros((npatch, 4, meqn, max(mx, my)))
    cpu(q, mbc, aux, qc, dx, dy, dt, params, codes, cc, ec)
    k = make_gpu_patch_kernel(solver, mx, my, mbc, order=order, transverse_waves=tw,
                              capacity_index=capa, status=status, work_sharing=work_sharing,
                              **kw)
    assert k.work_sharing == (work_sharing and solver.shares_work)
    qg = np.full_like(q, np.nan)
    cg = np.full(npatch, np.nan)
    eg = np.full_like(ec, np.nan)
    st = np.full((npatch, 1 + len(solver.positive)), np.nan) if status else None
    rows = np.arange(npatch, dtype=np.int64) if rows is None else rows
    k(rows, q, aux, qg, dx, dy, dt, params, codes, cg, eg, st)
    b = mbc
    return (qc[:, :, b:-b, b:-b], cc, ec), (qg[:, :, b:-b, b:-b], cg, eg), k, (qg, st)


def assert_same(cpu, gpu):
    for a, b in zip(cpu, gpu):
        assert np.all(np.isfinite(b)), "the GPU kernel left entries unwritten"
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("order,tw", [(2, 2), (2, 1), (1, 1), (1, 0)])
@pytest.mark.parametrize("work_sharing", [True, False])
def test_shallow_roe_options(order, tw, work_sharing):
    cpu, gpu, k, _ = run_both(get_riemann("shallow_roe"), 6, 5, order, tw,
                              work_sharing=work_sharing)
    assert k.rows_per_tile == 5  # the whole patch in one tile
    # the face record: amdq, apdq (cq with order 2), the Roe face state with transverse
    # terms; the cell states once per step in shared memory
    assert k.record_doubles == (3 if order == 2 else 2) * 3 + (4 if work_sharing and tw else 0)
    assert k.cell_states == work_sharing
    assert_same(cpu, gpu)


@pytest.mark.parametrize("cells", [True, False])
@pytest.mark.parametrize("order,tw", [(2, 2), (1, 1)])
def test_work_sharing_pieces_are_called(cells, order, tw):
    """A solver whose rpn2/rpt2 differ from its pieces: the patch kernel gives the CPU
    kernel's numbers on the pieces (cell states from shared memory or computed in the
    threads, the face state stored in phase 1 for phase 3), bit for bit, over dry
    cells; with ``work_sharing=False`` both give the other numbers."""
    data = random_patches(MARKED, 7, 6, 2, 2, seed=11)
    cpu, gpu, k, _ = run_both(MARKED, 7, 6, order, tw, data=data, cell_states=cells)
    assert k.work_sharing and k.cell_states == cells and k.record_doubles == (
        (3 if order == 2 else 2) * 3 + 4)
    assert (k.cell_state_doubles > 0) == cells
    assert_same(cpu, gpu)
    cpu0, gpu0 = run_both(MARKED, 7, 6, order, tw, data=data, work_sharing=False)[:2]
    assert_same(cpu0, gpu0)
    assert not np.array_equal(cpu0[0], cpu[0])  # the marker changes the result


@pytest.mark.parametrize("cells", [True, False])
def test_user_solver_on_the_contract_with_aux_and_capacity(cells):
    """A user solver on the work-sharing contract whose transverse solve reads both
    cell states and the face state, with aux, a capacity and 3 ghost cells."""
    cpu, gpu, k, _ = run_both(USER_SHARED, 6, 5, capa=2, mbc=3, seed=12, cell_states=cells)
    assert k.cell_states == cells and k.record_doubles == 3 + 2
    assert_same(cpu, gpu)


@pytest.mark.parametrize("name", ["shallow_hlle", "euler"])
def test_registered_solvers(name):
    assert_same(*run_both(get_riemann(name), 5, 6, seed=1)[:2])


def test_geoclaw_solver_with_dry_cells():
    import forestpy.extensions.geoclaw.riemann  # noqa: F401 - registers "geoclaw"

    solver = get_riemann("geoclaw")
    data = geoclaw_data(6, 6, 2, 2, seed=2)
    assert (data[0][:, 0] == 0).any() and (data[0][:, 0] > 0).any()
    assert_same(*run_both(solver, 6, 6, data=data)[:2])


def test_user_fwave_solver_with_capacity_and_wide_ghosts():
    """A solver written in this file (no CUDA code), f-waves, aux, a capacity, mbc 3."""
    assert_same(*run_both(USER, 5, 4, capa=2, mbc=3, seed=3)[:2])


@pytest.mark.parametrize("work_sharing,cells,shared", [
    (False, None, 6000), (True, None, 7000), (True, False, 7000)])
def test_row_tiles_with_a_short_last_tile(work_sharing, cells, shared):
    """Shared memory for 2 rows: tiles of 2, 2, 2, 1 rows, one block each; the limiter
    and the transverse terms cross the tile boundaries as in one tile (with work
    sharing: the cell states of each tile and its halo), the patch's Courant number
    comes from its last block."""
    ncs = 5 if work_sharing and cells is not False else 0
    R = plan_patch(4, 7, 3, 3, shared_bytes=shared, cell_state=ncs,
                   edge_state=4 if work_sharing else 0)[0]
    assert R == 2
    cpu, gpu, k, _ = run_both(get_riemann("shallow_roe"), 4, 7, shared_bytes=shared, seed=5,
                              npatch=3, rows=np.array([2, 0, 1]), work_sharing=work_sharing,
                              cell_states=cells)
    assert k.rows_per_tile == R and k.tiles == 4 and k.cell_states == (ncs > 0)
    assert_same(cpu, gpu)
    tickets = k._tile_scratch(np.zeros((3, 1, 1, 1)))[1]
    assert not tickets.any()  # back to zero for the next launch


@pytest.mark.parametrize("mx,shared", [(12, None), (8, 8000)])
def test_fused_status_is_the_status_kernels_row(mx, shared):
    """``status=True``: the per-patch row of ``patch_status`` for the new state, bitwise
    that of the GPU status kernel (its summation order), for patches listed in any
    order, from one block a patch or (small shared memory) from the last of a patch's
    tile blocks; the patches not listed keep their entries."""
    from forestpy.backend import GPUBackend
    from forestpy.patches.status import patch_status

    solver = get_riemann("shallow_roe")
    rows = np.array([2, 0], dtype=np.int64)
    kw = {} if shared is None else {"shared_bytes": shared}
    cpu, gpu, k, (qg, st) = run_both(solver, mx, mx, npatch=3, rows=rows, status=True,
                                     seed=6, **kw)
    assert (k.tiles > 1) == (shared is not None)
    for a, b in zip(cpu, gpu):
        np.testing.assert_array_equal(a[rows], b[rows])
        assert np.isnan(b[1]).all()
    assert np.isnan(st[1]).all()
    be = GPUBackend()
    want = be.to_host(patch_status(be.to_device(np.nan_to_num(qg)), 2, solver.positive,
                                   backend=be))
    np.testing.assert_array_equal(st[rows], want[rows])


def test_plan_fits_48k_of_shared_memory():
    """Shallow water: mx 16 one tile of 352 threads, mx 32 in tiles of 7 rows; every
    plan within the static shared memory and the thread limit."""
    assert plan_patch(16, 16, 3, 3)[:2] == (16, 352)
    assert plan_patch(32, 32, 3, 3)[0] == 7
    for mx in (8, 16, 32):
        for ncs, nes in ((0, 0), (5, 4), (0, 4)):
            R, nt, na, nf = plan_patch(mx, mx, 3, 3, status_cols=2, cell_state=ncs,
                                       edge_state=nes)
            assert (na + nf) * 8 <= 47 * 1024 and nt % 32 == 0 and nt <= 1024
    # the work-sharing contract (Roe: 5 doubles a cell, 4 a face): 16x16 in two tiles of
    # 9 and 7 rows, 224 threads (the cell states in shared memory cost no tile more);
    # 32x32 in tiles of 5 rows with the cell states in the threads, 3 with them shared
    assert plan_patch(16, 16, 3, 3, cell_state=5, edge_state=4)[:2] == (9, 224)
    assert plan_patch(16, 16, 3, 3, edge_state=4)[:2] == (9, 224)
    assert plan_patch(32, 32, 3, 3, edge_state=4)[:2] == (5, 288)
    assert plan_patch(32, 32, 3, 3, cell_state=5, edge_state=4)[0] == 3
    with pytest.raises(ValueError, match="does not fit"):
        plan_patch(16, 16, 3, 3, shared_bytes=1000)


def test_bad_arguments_are_refused():
    solver = get_riemann("shallow_roe")
    with pytest.raises(ValueError, match="mbc"):
        make_gpu_patch_kernel(solver, 8, 8, 1)
    with pytest.raises(ValueError, match="order"):
        make_gpu_patch_kernel(solver, 8, 8, 2, order=3)
    k = make_gpu_patch_kernel(solver, 4, 4, 2, status=True)
    q = np.zeros((1, 3, 8, 8))
    with pytest.raises(ValueError, match="status_out"):
        k(np.arange(1), q, np.zeros((1, 0, 8, 8)), q.copy(), np.ones(1), np.ones(1), 0.1,
          solver.params_array(), np.ones(3, np.int64), np.zeros(1), np.zeros((1, 4, 3, 4)))
    with pytest.raises(ValueError, match="C-contiguous"):
        k(np.arange(1), q[:, :, ::-1], np.zeros((1, 0, 8, 8)), q.copy(), np.ones(1),
          np.ones(1), 0.1, solver.params_array(), np.ones(3, np.int64), np.zeros(1),
          np.zeros((1, 4, 3, 4)), np.zeros((1, 2)))


def test_solver_option_selects_the_patch_kernel():
    """``ClawpackSolver(gpu_kernel="patch")`` steps with it: the CPU solver's results."""
    from types import SimpleNamespace

    from forestpy.solvers.clawpack.solver import ClawpackSolver

    from forestpy.backend import GPUBackend

    solver = get_riemann("shallow_roe")
    q, aux, dx, dy = make_data(solver, 6, 6, 2, 2, seed=7)
    cpu = ClawpackSolver(solver).step(q, aux, SimpleNamespace(mx=6, my=6, mbc=2, dx=dx, dy=dy),
                                      0.02)
    be = GPUBackend()
    gs = ClawpackSolver(solver, backend=be, gpu_kernel="patch")
    dev = [be.to_device(a) for a in (q, aux, dx, dy)]
    got = gs.step(*dev[:2], SimpleNamespace(mx=6, my=6, mbc=2, dx=dev[2], dy=dev[3]), 0.02)
    got = [be.to_host(a) for a in got]
    b = 2
    np.testing.assert_array_equal(got[0][:, :, b:-b, b:-b], cpu[0][:, :, b:-b, b:-b])
    np.testing.assert_array_equal(got[1], cpu[1])
    np.testing.assert_array_equal(got[2], cpu[2])
    with pytest.raises(ValueError, match="gpu_kernel"):
        ClawpackSolver(solver, backend=GPUBackend(), gpu_kernel="rows")


@pytest.mark.parametrize("work_sharing", [True, False])
def test_production_patch_size_16(work_sharing):
    """A 16x16 patch: with the work-sharing contract two tiles of 9 and 7 rows, 224
    threads, the cell states in shared memory; without it one tile of 352 threads, no
    face solved twice."""
    cpu, gpu, k, _ = run_both(get_riemann("shallow_roe"), 16, 16, npatch=1, seed=8,
                              work_sharing=work_sharing)
    want = (9, 2, 224, True) if work_sharing else (16, 1, 352, False)
    assert (k.rows_per_tile, k.tiles, k.nthreads, k.cell_states) == want
    assert_same(cpu, gpu)


# the production patch sizes (mx 16: one tile of 352 threads; mx 32: five blocks of 7
# rows) in the simulator, more solvers: 1-3 s each on two cores
@pytest.mark.slow
@pytest.mark.parametrize("name,mx,order,tw", [
    ("shallow_roe", 32, 2, 2), ("shallow_hlle", 16, 2, 2), ("euler", 16, 2, 1),
    ("geoclaw", 16, 2, 2), ("geoclaw", 32, 2, 2), ("shallow_roe", 16, 1, 0),
])
def test_production_patch_sizes(name, mx, order, tw):
    import forestpy.extensions.geoclaw.riemann  # noqa: F401

    solver = get_riemann(name)
    data = geoclaw_data(mx, mx, 2, 1, seed=8) if name == "geoclaw" else None
    assert_same(*run_both(solver, mx, mx, order, tw, npatch=1, data=data, seed=8)[:2])


_PTX = r'''
import os, sys
sys.argv = ["gpu_kernel_resources", "--mx", "8", "--kernels", "patch+status"]
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import gpu_kernel_resources as r
try:
    import numba_cuda  # the GPU machines' compiler (Numba's built-in CUDA target, which
    # is deprecated, cannot type min/max of two numbers, so neither kernel compiles)
    from numba.cuda.cudadrv import nvvm
    nvvm.NVVM()
except Exception as e:  # no numba-cuda or no libNVVM: nothing to compile with
    print(repr(e))
    sys.exit(77)
r.main(sys.argv[1:])
'''


# compiles the kernel (with the fused status) for sm_90 with numba-cuda and NVVM and
# assembles it with ptxas (no GPU needed): the simulator runs the kernel as Python and
# cannot see a typing error that only the real compiler finds, nor the shuffles it
# replaces; ~15 s; skipped where numba-cuda, libNVVM or ptxas is missing
@pytest.mark.slow
def test_kernel_compiles_for_the_device():
    import json
    import shutil

    from testsupport import ROOT, compile_for_device

    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas")
    out = compile_for_device(_PTX, preamble=False, cwd=ROOT)
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["registers"] > 0 and rec["smem_bytes"] > 0
    assert rec["spill_store_bytes"] == 0 or rec["registers"] == rec["register_cap"]


def _hump(x, y):
    h = 1.0 + 0.5 * np.exp(-60.0 * ((x - 0.3) ** 2 + (y - 0.35) ** 2))
    return np.stack([h, 0.4 * h, 0.1 * h])


# slow: a short adaptive run on the GPU backend in the simulator, 20-40 s
@pytest.mark.slow
@pytest.mark.parametrize("subcycle", [False, True])
def test_adaptive_run_with_the_patch_kernel(monkeypatch, subcycle):
    """A whole adaptive run (ghost fill, time sync at coarse-fine faces, regrids; with
    subcycling each level a launch over its rows) with ``FORESTPY_GPU_KERNEL=patch``:
    the CPU run's states bit for bit."""
    from forestpy import Domain, Simulation

    monkeypatch.setenv("FORESTPY_GPU_KERNEL", "patch")

    def setup(backend):
        return Simulation("shallow_roe", qinit=_hump, domain=Domain((0, 0), (1, 1)),
                          bc=("wall", "extrap", "extrap", "wall"), mx=4, min_level=1,
                          max_level=2, regrid_interval=1, refine_threshold=0.02,
                          t_final=0.03, params={"grav": 1.0}, backend=backend,
                          subcycle=subcycle)

    cpu = setup("cpu")
    gpu = setup("gpu")
    assert len(cpu.patches_per_level()) == 2  # coarse-fine faces: the time sync acts
    cpu.run()
    gpu.run()
    assert gpu.solver.gpu_kernel == "patch" and gpu.subcycling == subcycle
    assert cpu.regrids > 0
    assert gpu.steps == cpu.steps and gpu.forest == cpu.forest
    b = cpu.mbc
    np.testing.assert_array_equal(gpu.backend.to_host(gpu.q)[:, :, b:-b, b:-b],
                                  cpu.q[:, :, b:-b, b:-b])
