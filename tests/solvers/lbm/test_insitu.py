"""The compressed-subgrid workflow (forestpy.solvers.lbm.insitu): without compression it
is the plain solver bit for bit; with the 3D dwt53 codec it keeps the mass to
round-off, follows the uncompressed Taylor-Green decay, and runs a grid ten times its
memory limit."""

import math

import numpy as np
import pytest
from forestpy.solvers.lbm import LBM, sphere
from forestpy.solvers.lbm.insitu import InSituLBM, Ring, StoreFull, nmse

from forestpy.io.codecs import CodecError


def _random_state(shape, seed=0):
    rng = np.random.default_rng(seed)
    return 1.0 + 0.01 * rng.standard_normal(shape), 0.05 * rng.standard_normal((3, *shape))


@pytest.mark.parametrize("subgrids,K,collision,dtype", [
    ((2, 1, 1), 2, "bgk", "float64"),   # one split axis, temporal blocking 2
    ((2, 2, 3), 1, "trt", "float32"),   # faces, edges and corners; odd K: ghost width 2
    ((4, 1, 2), 3, "bgk", "float64"),   # K = 3: ghost width 4, cycles start at both parities
    ((1, 1, 1), 2, "trt", "float64"),   # one subgrid: periodic inside
])
def test_no_codec_equals_plain_solver_bit_for_bit(subgrids, K, collision, dtype):
    shape = (16, 8, 12)
    rho, u = _random_state(shape)
    solid = sphere(shape, (7.5, 3.5, 5.5), 2.5)
    kw = dict(collision=collision, force=(1e-5, 0.0, 2e-6), solid=solid, dtype=dtype)
    plain = LBM(shape, 0.7, rho=rho, u=u, **kw)
    sub = InSituLBM(shape, 0.7, state=plain.raw(), subgrids=subgrids, steps_per_cycle=K,
                    **kw)
    for _ in range(3):
        plain.run(2 * K)
        sub.run(2 * K)
        np.testing.assert_array_equal(sub.state(), plain.raw())
    assert sub.t == plain.t and sub.ratio == pytest.approx(1.0)
    # the initial state from rho and u (same equilibrium) and the mass
    sub2 = InSituLBM(shape, 0.7, rho=rho, u=u, subgrids=subgrids, steps_per_cycle=K, **kw)
    np.testing.assert_allclose(sub2.state(), LBM(shape, 0.7, rho=rho, u=u, **kw).raw(),
                               rtol=0, atol=1e-15 if dtype == "float64" else 1e-8)
    assert sub2.mass() == pytest.approx(plain.mass(), rel=1e-13 if dtype == "float64"
                                        else 1e-6)


def test_compressed_mass_conserved_and_close_to_plain():
    shape = (16, 16, 16)
    rho, u = _random_state(shape, 1)
    rho = 1.0 + 0.01 * np.sin(2 * np.pi * np.arange(16) / 16)[:, None, None] * np.ones(shape)
    u *= 0.2
    plain = LBM(shape, 0.8, rho=rho, u=u)
    sub = InSituLBM(shape, 0.8, rho=rho, u=u, subgrids=(2, 2, 1), steps_per_cycle=2,
                    codec="dwt53:tol=1e-7", block=8)
    m0 = sub.mass()
    assert m0 == pytest.approx(plain.mass(), rel=1e-15)
    sub.run(20)
    plain.run(20)
    # exact block totals + a consistent state: mass to round-off (sum |h| ~ 1e2 here)
    assert abs(sub.mass() - m0) < 1e-11
    diff = np.abs(sub.state() - plain.raw()).max()
    assert 0 < diff < 1e-5  # lossy, and close
    err = nmse(plain.density(), sub.density())
    assert 0 < err < 1e-6
    assert sub.ratio > 1.5
    assert min(r for _, r in sub.ratio_history) > 1.5


def _tg_amplitude(sim, n):
    u = sim.velocity()[0]
    x = (np.arange(n) + 0.5) * 2 * np.pi / n
    mode = np.sin(x)[:, None, None] * np.cos(x)[None, :, None]
    return float((u * mode).sum() / (mode * mode).sum() / u.shape[2])


def test_taylor_green_decay_compressed():
    """Decay rate of a Taylor-Green vortex, compressed (error-bounded, gradual start-up)
    against the same grid uncompressed and against 2 nu k^2."""
    n, nz, tau, U = 16, 8, 0.8, 0.02
    k = 2 * np.pi / n

    def velocity(x, y, z):
        X, Y = k * (x + 0.5), k * (y + 0.5)
        ux = U * np.sin(X) * np.cos(Y)
        uy = -U * np.cos(X) * np.sin(Y)
        return np.stack(np.broadcast_arrays(ux, uy, 0.0 * ux * z))

    shape = (n, n, nz)
    steps = 64
    plain = LBM(shape, tau, u=velocity(*np.ogrid[:n, :n, :nz]))
    sub = InSituLBM(shape, tau, u=velocity, subgrids=(2, 2, 1), steps_per_cycle=4,
                    codec="dwt53:tol=1e-7", block=8, startup=(32, 0.01))
    a0 = _tg_amplitude(plain, n)
    assert _tg_amplitude(sub.snapshot(), n) == pytest.approx(a0, rel=1e-5)
    plain.run(steps)
    sub.run(steps)
    rate = math.log(a0 / _tg_amplitude(plain, n)) / steps
    rate_sub = math.log(a0 / _tg_amplitude(sub.snapshot(), n)) / steps
    exact = 2 * (tau - 0.5) / 3 * k * k
    assert rate == pytest.approx(exact, rel=2e-2)  # 16 cells a wavelength, equilibrium start
    assert rate_sub == pytest.approx(rate, rel=1e-4)
    assert nmse(plain.density(), sub.density()) < 1e-6
    ratios = [r for _, r in sub.ratio_history]
    assert ratios[0] < ratios[-1] and ratios[-1] > 3  # tight first, then loosened


def test_ring_fifo_and_store_full():
    ring = Ring(np, 64)
    a = ring.alloc(20)
    ring.push(a, 20, "a")
    b = ring.alloc(20)
    ring.push(b, 20, "b")
    assert (a, b) == (0, 24)
    with pytest.raises(StoreFull):
        ring.alloc(24)  # 48 + 24 > 64, and no room before the oldest
    assert ring.pop() == (0, "a")
    c = ring.alloc(24)  # wraps to 0
    ring.push(c, 24, "c")
    assert c == 0 and [p for _, p in ring.records()] == ["b", "c"]
    with pytest.raises(StoreFull):
        ring.alloc(8)  # head 24 meets the tail 24
    grow = Ring(np, 16, grow=True)
    grow.push(grow.alloc(16), 16, "x")
    grow.arena[:16] = 7
    s = grow.alloc(40)
    assert s == 16 and grow.capacity >= 56 and np.all(grow.arena[:16] == 7)


def test_memory_limit_checked():
    shape = (8, 8, 32)
    sim = InSituLBM(shape, 0.8, subgrids=(1, 1, 4), codec="dwt53:tol=1e-6", block=8)
    work = sim.working_bytes()
    with pytest.raises(StoreFull, match="working set"):
        InSituLBM(shape, 0.8, subgrids=(1, 1, 4), codec="dwt53:tol=1e-6", block=8,
                  memory_limit=work)
    rho = 1.0 + 0.01 * np.random.default_rng(0).standard_normal(shape)
    with pytest.raises(StoreFull, match="ring buffer"):  # random data: ratio ~ 1
        InSituLBM(shape, 0.8, rho=rho, subgrids=(1, 1, 4), codec="dwt53:tol=1e-12",
                  block=8, memory_limit=work + sim.state_bytes // 4)


def test_bad_input():
    with pytest.raises(ValueError, match="subgrids"):
        InSituLBM((8, 8, 8), 0.8, subgrids=(3, 1, 1))
    with pytest.raises(ValueError, match="ghost width"):
        InSituLBM((8, 8, 8), 0.8, subgrids=(4, 1, 1), steps_per_cycle=3)
    with pytest.raises(ValueError, match="multiple of the codec block"):
        InSituLBM((16, 8, 8), 0.8, subgrids=(4, 1, 1), codec="dwt53:tol=1e-6", block=8)
    with pytest.raises(CodecError, match="in-situ codec"):
        InSituLBM((8, 8, 8), 0.8, codec="zfpy:tol=1e-3")
    with pytest.raises(CodecError, match="unknown parameter"):
        InSituLBM((8, 8, 8), 0.8, codec="dwt53:rtol=1e-3", block=4)
    sim = InSituLBM((8, 8, 8), 0.8, subgrids=(2, 1, 1), steps_per_cycle=2)
    with pytest.raises(ValueError, match="multiple of steps_per_cycle"):
        sim.run(3)


def test_gpu_simulator_equals_cpu():
    """The GPU path (CUDA simulator: the step kernel on the work buffer, the ring and the
    interface buffers in device arrays) gives the CPU's bits; the dwt53 kernels' bytes
    are checked against the CPU in tests/driver/io/test_codec3d.py."""
    shape = (8, 4, 4)
    rho, u = _random_state(shape, 2)
    kw = dict(rho=rho, u=u, subgrids=(2, 1, 1), steps_per_cycle=2,
              solid=sphere(shape, (3.5, 1.5, 1.5), 1.2))
    cpu = InSituLBM(shape, 0.8, **kw)
    gpu = InSituLBM(shape, 0.8, backend="gpu", **kw)
    cpu.run(2)
    gpu.run(2)
    np.testing.assert_array_equal(gpu.state(), cpu.state())


@pytest.mark.slow
def test_grid_ten_times_the_memory_limit():
    """An FP64 run whose state is 10x the memory limit (the ring's capacity is the limit
    less the working set) finishes, mass to round-off, density close to the plain run.
    A long grid: the interface slabs cost ~4 G nsub / nz of the state and the work
    buffer ~1 / nsub, so the working set is 5 % here and the ring needs a ratio >= 20."""
    nz = 8192
    shape = (8, 8, nz)

    def rho(x, y, z):
        return 1.0 + 1e-3 * np.sin(2 * np.pi * z / nz) + 0.0 * x * y

    def u(x, y, z):
        ux = 0.01 * np.cos(2 * np.pi * z / 1024) + 0.0 * x * y
        return np.stack(np.broadcast_arrays(ux, 0.0 * ux, 0.0 * ux))

    limit = 27 * 8 * int(np.prod(shape)) // 10
    sim = InSituLBM(shape, 0.8, rho=rho, u=u, subgrids=(1, 1, 32), steps_per_cycle=2,
                    codec="dwt53:tol=1e-8", block=8, chunk=1, memory_limit=limit)
    m0 = sim.mass()
    sim.run(10)
    mem = sim.memory()
    assert mem["uncompressed"] >= 10 * mem["limit"] and mem["peak_resident"] <= limit
    assert min(r for _, r in sim.ratio_history) > 19
    assert abs(sim.mass() - m0) < 1e-9
    plain = LBM(shape, 0.8, rho=rho(*np.ogrid[:8, :8, :nz]), u=u(*np.ogrid[:8, :8, :nz]))
    plain.run(10)
    assert nmse(plain.density(), sim.density()) < 1e-7  # 1.0e-8 measured


@pytest.mark.slow
def test_gpu_simulator_with_dwt53_equals_cpu():
    """The compressed workflow on the GPU backend (CUDA simulator): the dwt53 kernels
    encode strided views of the work buffer into the ring's device views, write the
    decoded values back and decode into the work buffer -- the CPU's bits and bytes."""
    shape = (8, 4, 4)
    rng = np.random.default_rng(2)
    kw = dict(rho=1.0 + 0.01 * rng.standard_normal(shape),
              u=0.01 * rng.standard_normal((3, *shape)), subgrids=(2, 1, 1),
              steps_per_cycle=2, block=4, codec="dwt53:tol=1e-6",
              solid=sphere(shape, (3.5, 1.5, 1.5), 1.2))
    cpu = InSituLBM(shape, 0.8, **kw)
    gpu = InSituLBM(shape, 0.8, backend="gpu", **kw)
    assert gpu.ring.live == cpu.ring.live
    cpu.run(2)
    gpu.run(2)
    np.testing.assert_array_equal(gpu.state(), cpu.state())
    assert gpu.ring.live == cpu.ring.live
