"""Whole simulations on the GPU backend against the CPU backend.

Without a GPU the GPU backend runs its CUDA kernels in Numba's CUDA simulator (set up
by conftest.py), so these cases are tiny; ``benchmarks/gpu_parity.py`` runs the demos
at full size on a real GPU.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from forestpy import Domain, Simulation

if not numba.config.ENABLE_CUDASIM:
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no GPU and the CUDA simulator is off", allow_module_level=True)

TINY = dict(mx=4, min_level=1, max_level=1)


def host(sim, a):
    return sim.backend.to_host(a)


def compare(cpu, gpu, rtol=1e-12):
    assert gpu.steps == cpu.steps and gpu.regrids == cpu.regrids
    assert gpu.forest == cpu.forest
    b = cpu.mbc
    qc = cpu.q[:, :, b:-b, b:-b]
    qg = host(gpu, gpu.q)[:, :, b:-b, b:-b]
    assert np.abs(qg - qc).max() <= rtol * np.abs(qc).max()
    for k, v in cpu.totals().items():
        assert gpu.totals()[k] == pytest.approx(v, rel=1e-13, abs=1e-13)


def hump(x, y):
    h = 1.0 + 0.5 * np.exp(-60.0 * ((x - 0.3) ** 2 + (y - 0.35) ** 2))
    return np.stack([h, 0.4 * h, 0.1 * h])


def adaptive_shallow_water(backend, subcycle=False):
    return Simulation("shallow_roe", qinit=hump, domain=Domain((0, 0), (1, 1)),
                      bc=("wall", "extrap", "extrap", "wall"), mx=4, min_level=1,
                      max_level=2, regrid_interval=1, refine_threshold=0.02, t_final=0.06,
                      params={"grav": 1.0}, backend=backend, subcycle=subcycle)


# slow: 2 steps of 16 patches take 20-45 s in the CUDA simulator (its patch_status and step
# kernels start hundreds of Python threads a launch)
@pytest.mark.slow
@pytest.mark.parametrize("subcycle", [False, True])
def test_adaptive_time_sync_and_regrid(subcycle):
    cpu = adaptive_shallow_water("cpu", subcycle)
    gpu = adaptive_shallow_water("gpu", subcycle)
    assert len(cpu.patches_per_level()) == 2  # coarse-fine faces: the time sync acts
    cpu.run()
    gpu.run()
    assert cpu.regrids > 0 and cpu.subcycling == gpu.subcycling == subcycle
    assert cpu.level_steps == gpu.level_steps
    compare(cpu, gpu)


@pytest.mark.slow  # CUDA-simulator run; CI's slow step
def test_radial_dam_walls(radial_dam):
    kw = dict(**TINY, t_final=0.1)
    cpu = radial_dam.setup(**kw, backend="cpu").run()
    gpu = radial_dam.setup(**kw, backend="gpu").run()
    compare(cpu, gpu)
    assert gpu.totals()["h"] == pytest.approx(gpu.totals_initial["h"], rel=1e-13)


# slow: 5-7 s in the CUDA simulator (whole runs on the GPU backend stay in the fast suite:
# the radial dam)
@pytest.mark.slow
def test_swirl_aux_b4step(swirl):
    kw = dict(mx=4, min_level=1, max_level=1, t_final=0.05)
    compare(swirl.setup(**kw, backend="cpu").run(), swirl.setup(**kw, backend="gpu").run())


# slow: 7-16 s in the CUDA simulator (whole runs on the GPU backend stay in the fast suite:
# the radial dam)
@pytest.mark.slow
def test_euler_quadrants(euler_quadrants):
    kw = dict(mx=4, min_level=1, max_level=1, t_final=0.03)
    cpu = euler_quadrants.setup(**kw, backend="cpu").run()
    gpu = euler_quadrants.setup(**kw, backend="gpu").run()
    compare(cpu, gpu)


# slow: 7-16 s in the CUDA simulator (whole runs on the GPU backend stay in the fast suite:
# the radial dam)
@pytest.mark.slow
def test_one_transfer_per_step(radial_dam):
    """Per step only the Courant number (with the state checks) reaches the host."""
    sim = radial_dam.setup(**TINY, regrid_interval=0, backend="gpu")
    sim.run(max_steps=1)  # compiles, estimates dt
    before = sim.backend.host_transfers
    for _ in range(2):
        accepted, _ = sim.step(0.5 * sim.dt)
        assert accepted
    assert sim.backend.host_transfers - before == 2
    assert type(sim.q).__module__.split(".")[0] in ("cupy", "numpy")
    if not numba.config.ENABLE_CUDASIM:
        assert type(sim.q).__module__.startswith("cupy")


# slow: 7-16 s in the CUDA simulator (whole runs on the GPU backend stay in the fast suite:
# the radial dam)
@pytest.mark.slow
def test_float32_storage_close_to_float64(radial_dam):
    kw = dict(**TINY, t_final=0.05, regrid_interval=0)
    f64 = radial_dam.setup(**kw, backend="gpu").run()
    f32 = radial_dam.setup(**kw, backend="gpu", dtype="float32").run()
    assert f32.q.dtype == np.float32
    # interiors only: after a step the ghost cells hold whatever the step's new array
    # held (filled at the start of the next step), which in float32 may be a
    # signalling NaN whose cast warns
    b = f32.mbc
    a = host(f64, f64.q)[:, :, b:-b, b:-b]
    c = host(f32, f32.q)[:, :, b:-b, b:-b].astype(np.float64)
    assert np.abs(a - c).max() < 1e-5


def test_float32_is_a_gpu_option():
    with pytest.raises(ValueError, match="float32"):
        Simulation("advection", qinit=lambda x, y: (0 * x)[None], dtype="float32")


# slow: 5-7 s in the CUDA simulator (whole runs on the GPU backend stay in the fast suite:
# the radial dam)
@pytest.mark.slow
def test_nan_on_gpu_is_reported(radial_dam):
    from forestpy.simulation import StateError

    sim = radial_dam.setup(**TINY, regrid_interval=0, backend="gpu")
    q = host(sim, sim.q).copy()
    q[0, 1, 3, 3] = np.nan
    sim.q = sim.backend.to_device(q)
    with pytest.raises(StateError, match="NaN"):
        sim.step(1e-3)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_patch_status_matches_numpy(backend):
    from forestpy.backend import get_backend
    from forestpy.patches.status import patch_status

    be = get_backend(backend)
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (3, 3, 9, 8))
    q[1, :, 0, 0] = np.nan  # ghost cells are ignored
    out = be.to_host(patch_status(be.to_device(q), 2, (0, 2), be))
    inner = q[:, :, 2:-2, 2:-2]
    assert np.allclose(out[:, 0], inner.sum(axis=(1, 2, 3)), rtol=1e-13)
    assert np.array_equal(out[:, 1], inner[:, 0].min(axis=(1, 2)))
    assert np.array_equal(out[:, 2], inner[:, 2].min(axis=(1, 2)))
    q[2, 1, 4, 4] = np.inf
    assert not np.isfinite(be.to_host(patch_status(be.to_device(q), 2, (0,), be))[2, 0])


@pytest.mark.slow  # CUDA-simulator run; CI's slow step
def test_step_status_is_one_launch_one_transfer_and_matches_numpy():
    """The GPU step's whole check record from one launch and one transfer: the largest
    Courant number (NaN wins), the interior sum and the minima of the positive fields,
    whichever block finishes last."""
    from forestpy.backend import get_backend
    from forestpy.cuda_device import kernel_launches
    from forestpy.patches.status import step_status

    be = get_backend("gpu")
    rng = np.random.default_rng(4)
    q = rng.uniform(-1, 1, (5, 3, 8, 8))
    q[1, :, 0, 0] = np.nan  # ghost cells are ignored
    cfl = rng.uniform(0, 1, 5)
    inner = q[:, :, 2:-2, 2:-2]
    launches, transfers = kernel_launches(), be.host_transfers
    got = step_status(be.to_device(q), 2, (0, 2), be.to_device(cfl), be)
    assert (kernel_launches() - launches, be.host_transfers - transfers) == (1, 1)
    assert got[0] == cfl.max()
    assert got[1] == pytest.approx(inner.sum(), rel=1e-13)
    assert got[2] == inner[:, 0].min() and got[3] == inner[:, 2].min()
    for _ in range(2):  # the ticket counter is reset for the next launch
        again = step_status(be.to_device(q), 2, (0, 2), be.to_device(cfl), be)
        np.testing.assert_array_equal(again, got)
    cfl[3] = np.nan
    q[2, 1, 4, 4] = np.inf
    got = step_status(be.to_device(q), 2, (0,), be.to_device(cfl), be)
    assert np.isnan(got[0]) and not np.isfinite(got[1])
    assert list(step_status(be.to_device(q), 2, (0,), be.to_device(cfl[:0]), be,
                            check=False)) == [0.0]


# slow: ~30 s in the CUDA simulator
@pytest.mark.slow
def test_subcycled_gpu_step_reads_the_device_twice_and_retakes_a_rejected_step():
    """A subcycled GPU coarse step keeps its level steps' Courant numbers on the device:
    two transfers per step (those numbers, then the status record), however many levels
    step; a step rejected in one of its level steps is put back and retaken as on the
    CPU."""
    sims = {be: adaptive_shallow_water(be, subcycle=True) for be in ("cpu", "gpu")}
    for sim in sims.values():
        sim.regrid_interval = 0
        sim.run(max_steps=1)
    cpu, gpu = sims["cpu"], sims["gpu"]
    assert len(gpu.patches_per_level()) == 2 and gpu.subcycling
    dt = cpu.dt
    before = gpu.backend.host_transfers
    assert gpu.step(0.5 * dt)[0] and cpu.step(0.5 * dt)[0]
    assert gpu.backend.host_transfers - before == 2
    q, forest = host(gpu, gpu.q).copy(), gpu.forest
    (ok_c, courant_c), (ok_g, courant_g) = cpu.step(50 * dt), gpu.step(50 * dt)
    assert not ok_c and not ok_g and courant_g == pytest.approx(courant_c, rel=1e-12)
    assert np.array_equal(host(gpu, gpu.q), q) and gpu.forest == forest
    assert gpu.rejected_steps == cpu.rejected_steps == 1
    cpu.run()
    gpu.run()
    assert cpu.level_steps == gpu.level_steps
    compare(cpu, gpu)
