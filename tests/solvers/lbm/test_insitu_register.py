"""The in-situ workflow (``InSituLBM``) on the register kernel (``kernel="register"``,
``solvers/lbm/fast.py``, generated for the subgrid-with-ghosts shape) in Numba's CUDA
simulator: in float64 arithmetic without compression the bits of the cell path and of
the plain solver; with the dwt53 codec the CPU's bits and its mass to round-off; float32
arithmetic within FP32 round-off, mass too.

Blocks of 4 threads, so that the tiny subgrids span several blocks along ``k``."""

import numpy as np
import pytest
from forestpy.solvers.lbm import LBM, fast, sphere
from forestpy.solvers.lbm.insitu import InSituLBM


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(fast, "THREADS", 4)


def _state(shape, seed):
    rng = np.random.default_rng(seed)
    return 1.0 + 0.01 * rng.standard_normal(shape), 0.03 * rng.standard_normal((3, *shape))


@pytest.mark.parametrize("subgrids,K,collision,dtype,with_solid", [
    ((2, 1, 1), 3, "bgk", "float64", True),   # K = 3: cycles start at both parities
    ((1, 2, 2), 2, "trt", "float32", False),  # edges and corners; kernels reading no flags
])
def test_register_no_codec_equals_cell_and_plain_bit_for_bit(subgrids, K, collision,
                                                             dtype, with_solid):
    shape = (8, 4, 4) if subgrids[0] > 1 else (2, 4, 4)
    rho, u = _state(shape, 4)
    solid = sphere(shape, (3.5, 1.5, 1.5), 1.2) if with_solid else None
    kw = dict(collision=collision, force=(1e-4, 0.0, -2e-5), solid=solid, dtype=dtype)
    plain = LBM(shape, 0.7, rho=rho, u=u, **kw)
    args = dict(state=plain.raw(), subgrids=subgrids, steps_per_cycle=K, **kw)
    cell = InSituLBM(shape, 0.7, **args)
    reg = InSituLBM(shape, 0.7, backend="gpu", kernel="register", arith="float64", **args)
    assert (reg.kernel, reg.arith, cell.kernel) == ("register", "float64", "cell")
    for _ in range(2):
        plain.run(K)
        cell.run(K)
        reg.run(K)
        np.testing.assert_array_equal(reg.state(), cell.state())
        np.testing.assert_array_equal(reg.state(), plain.raw())
    assert reg.t == plain.t == 2 * K


# the dwt53 kernels run as Python in the simulator: ~35 s for one cycle of two tiny
# subgrids (encode, decode, the mass and state read-outs)
@pytest.mark.slow
def test_register_compressed_equals_cpu_and_keeps_mass():
    """dwt53 codec, float64 arithmetic: the CPU cell path's bits and ring bytes, a lossy
    state (not the plain solver's), and the mass to round-off (the coding keeps each
    block's field totals)."""
    shape = (4, 2, 2)
    rho, u = _state(shape, 6)
    kw = dict(subgrids=(2, 1, 1), steps_per_cycle=2, block=2, codec="dwt53:tol=1e-6",
              force=(1e-4, 0.0, 0.0))
    plain = LBM(shape, 0.8, rho=rho, u=u, force=kw["force"])
    cpu = InSituLBM(shape, 0.8, state=plain.raw(), **kw)
    reg = InSituLBM(shape, 0.8, state=plain.raw(), backend="gpu", kernel="register", **kw)
    assert reg.arith == "float64"
    m0 = reg.mass()
    plain.run(2)
    cpu.run(2)
    reg.run(2)
    h = reg.state()
    np.testing.assert_array_equal(h, cpu.state())
    assert reg.ring.live == cpu.ring.live
    assert 0 < np.abs(h - plain.raw()).max() < 1e-5  # lossy, and close
    assert abs(reg.mass() - m0) < 1e-13 * m0


def test_register_float32_arithmetic_near_cpu_and_keeps_mass():
    """float32 storage and arithmetic (the default for float32): within a few FP32 units
    of the cell path (float64 arithmetic), not equal to it, mass to FP32 round-off."""
    shape = (8, 4, 4)
    rho, u = _state(shape, 7)
    kw = dict(rho=rho, u=u, subgrids=(2, 1, 1), steps_per_cycle=2, dtype="float32",
              solid=sphere(shape, (3.5, 1.5, 1.5), 1.2))
    cpu = InSituLBM(shape, 0.8, **kw)
    reg = InSituLBM(shape, 0.8, backend="gpu", kernel="register", **kw)
    assert reg.arith == "float32"
    m0 = reg.mass()
    cpu.run(4)
    reg.run(4)
    a, b = cpu.state(), reg.state()
    diff = np.abs(a.astype(np.float64) - b)
    assert 0 < diff.max() <= 8 * np.spacing(np.abs(a).max())
    assert abs(reg.mass() - m0) <= 1e-8 * m0


def test_kernel_choice_checked(monkeypatch):
    with pytest.raises(ValueError, match="unknown kernel"):
        InSituLBM((8, 4, 4), 0.8, backend="gpu", kernel="fast")
    with pytest.raises(ValueError, match="GPU backend only"):
        InSituLBM((8, 4, 4), 0.8, kernel="register")
    with pytest.raises(ValueError, match="arith"):
        InSituLBM((8, 4, 4), 0.8, backend="gpu", kernel="register", arith="float16")
    monkeypatch.setenv("FORESTPY_LBM_KERNEL", "register")
    assert InSituLBM((8, 4, 4), 0.8, backend="gpu").kernel == "register"
    assert InSituLBM((8, 4, 4), 0.8).kernel == "cell"  # the CPU runs the cell kernel
