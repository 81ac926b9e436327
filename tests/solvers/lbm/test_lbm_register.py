"""The register kernel (``solvers/lbm/fast.py``) in Numba's CUDA simulator against the
CPU kernel: the same bits in float64 arithmetic (every specialisation: periodic box,
body force, sphere, moving-wall inlet, pressure outlet along two axes; FP64, FP32 and
FP16 storage; BGK and TRT); float32 arithmetic within FP32 round-off of the CPU's
float64 arithmetic, and mass conserved to FP32 round-off.

The block size is set to 4 threads so that the small grids span several blocks along
``k`` (the last block partly outside the grid), as 128-thread blocks do on big grids.
"""

import numpy as np
import pytest
from forestpy.solvers.lbm import LBM, fast, sphere


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(fast, "THREADS", 4)


def _state(shape, seed):
    rng = np.random.default_rng(seed)
    rho = 1 + 0.03 * rng.standard_normal(shape)
    u = 0.04 * rng.standard_normal((3, *shape))
    return rng, rho, u


def _pair(shape, **kw):
    cpu = LBM(shape, backend="cpu", **kw)
    gpu = LBM(shape, backend="gpu", kernel="register", arith="float64", **kw)
    return cpu, gpu


def _same_bits(cpu, gpu, runs=(1, 2)):
    """Steps ``runs`` (after an even step, then after an odd and an even one)."""
    for steps in runs:
        cpu.run(steps)
        gpu.run(steps)
        a, b = cpu.raw(), gpu.raw()
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("collision,dtype,normal", [
    ("bgk", "float64", (0, 1, 0)), ("trt", "float32", (0, 0, -1)),
    ("trt", "float16", (0, 1, 0))])
def test_float64_arithmetic_equals_cpu_bit_for_bit(collision, dtype, normal):
    """Sphere-like random walls, an inlet and an outlet plane, a body force."""
    shape = (4, 5, 6)
    rng, rho, u = _state(shape, 11)
    axis = int(np.flatnonzero(normal)[0])
    inlet = np.zeros(shape, dtype=bool)
    outlet = np.zeros(shape, dtype=bool)
    first = [slice(None)] * 3
    last = [slice(None)] * 3
    # the inlet on the side the outlet normal points away from
    first[axis], last[axis] = (0, -1) if sum(normal) > 0 else (-1, 0)
    inlet[tuple(first)] = True
    outlet[tuple(last)] = True
    solid = (rng.random(shape) < 0.2) & ~inlet & ~outlet
    kw = dict(tau=0.66, collision=collision, force=(1e-3, 2e-4, -5e-4), solid=solid,
              inlet=inlet, inlet_velocity=(0.01, 0.03, -0.02), inlet_density=1.02,
              outlet=outlet, outlet_density=0.98, outlet_normal=normal, rho=rho, u=u,
              dtype=dtype)
    cpu, gpu = _pair(shape, **kw)
    _same_bits(cpu, gpu)
    np.testing.assert_array_equal(cpu.velocity(), gpu.velocity())


@pytest.mark.parametrize("force", [(0.0, 0.0, 0.0), (2e-4, -1e-4, 3e-4)])
def test_periodic_box_equals_cpu_bit_for_bit(force):
    """No walls: the specialisation that reads no flags (with and without forcing)."""
    shape = (3, 4, 9)
    _, rho, u = _state(shape, 5)
    cpu, gpu = _pair(shape, tau=0.8, collision="trt", force=force, rho=rho, u=u)
    _same_bits(cpu, gpu, runs=(1, 2, 1))


@pytest.mark.parametrize("collision,dtype", [("bgk", "float32"), ("trt", "float32")])
def test_float32_arithmetic_near_cpu_and_conserves_mass(collision, dtype):
    """A sphere in a periodic box, 20 steps: the FP32-arithmetic state within a few
    FP32 units in the last place of the CPU's (float64 arithmetic, the same storage),
    mass conserved to FP32 round-off (1e-8 relative: a lost or doubled population
    moves it by ~1e-4)."""
    shape = (6, 5, 7)
    _, rho, u = _state(shape, 3)
    solid = sphere(shape, (2.5, 2, 3), 1.6)
    kw = dict(tau=0.7, collision=collision, solid=solid, rho=rho, u=u, dtype=dtype)
    cpu = LBM(shape, backend="cpu", **kw)
    gpu = LBM(shape, backend="gpu", kernel="register", **kw)
    assert gpu.arith == "float32"
    m0 = gpu.mass()
    for _ in range(4):
        cpu.run(5)
        gpu.run(5)
        a, b = cpu.raw(), gpu.raw()
        diff = np.abs(a.astype(np.float64) - b)
        # 8 units in the last place of the largest |h|, and the states are not equal
        assert diff.max() <= 8 * np.spacing(np.abs(a).max())
        assert abs(gpu.mass() - m0) <= 1e-8 * m0
    assert diff.max() > 0  # FP32 arithmetic really is another computation


def test_float16_storage_float32_arithmetic():
    """FP16 storage, FP32 arithmetic: each stored half within one unit in the last place
    of the CPU's (float64 arithmetic) after an even and an odd step; mass to FP16
    round-off."""
    shape = (5, 4, 6)
    _, rho, u = _state(shape, 8)
    solid = sphere(shape, (2, 1.5, 2.5), 1.2)
    kw = dict(tau=0.6, collision="bgk", solid=solid, rho=rho, u=u, dtype="float16")
    cpu = LBM(shape, backend="cpu", **kw)
    gpu = LBM(shape, backend="gpu", kernel="register", **kw)
    m0 = gpu.mass()
    for _ in range(2):
        cpu.run(1)
        gpu.run(1)
        a, b = cpu.raw(), gpu.raw()
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        assert np.all(diff <= np.spacing(np.abs(a)).astype(np.float64))
    assert abs(gpu.mass() - m0) <= 1e-5 * m0


def test_generated_source_is_straight_line():
    """No loop and no per-thread array in the kernels; constants in the working
    precision."""
    src = fast.kernel_source((8, 8, 8), "float32", "float32", True, True, True, (1, 0, 0))
    assert "for " not in src and "local" not in src and "while" not in src
    assert src.count("f26 = ") == 2 and "F(0.2962962962962963)" in src  # 8/27
    with pytest.raises(ValueError, match="arith"):
        fast.kernel_source((8, 8, 8), "float16")


def test_selection_and_errors(monkeypatch):
    monkeypatch.setenv("FORESTPY_LBM_KERNEL", "register")
    assert LBM((4, 4, 4), tau=0.7, backend="gpu").kernel == "register"
    assert LBM((4, 4, 4), tau=0.7, backend="cpu").kernel == "cell"  # the CPU: cell only
    assert LBM((4, 4, 4), tau=0.7, backend="gpu", kernel="cell").kernel == "cell"
    with pytest.raises(ValueError, match="GPU backend only"):
        LBM((4, 4, 4), tau=0.7, backend="cpu", kernel="register")
    with pytest.raises(ValueError, match="unknown kernel"):
        LBM((4, 4, 4), tau=0.7, kernel="fast")
    with pytest.raises(ValueError, match="arith"):
        LBM((4, 4, 4), tau=0.7, arith="float16")
    with pytest.raises(ValueError, match="int32"):
        fast.check_shape((512, 512, 512))


_PTX = r'''
import os, re, shutil, subprocess, tempfile
from numba import cuda, types as T
from forestpy.solvers.lbm.fast import register_kernels
ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
f8 = T.float64
h = {"float32": T.float32, "float64": T.float64, "float16": T.float16}
for arith, storage, case in (("float32", "float32", (False, True, False, None)),
                             ("float32", "float16", (True, True, True, (1, 0, 0))),
                             ("float64", "float64", (True, True, True, (0, -1, 0)))):
    sig = (T.Array(h[storage], 1, "C"), T.Array(T.uint8, 1, "C")) + (f8,) * 10
    for fn in register_kernels((16, 12, 20), arith, storage, *case, cuda_jit=False):
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0), fastmath=arith == "float32")
        assert ".entry" in ptx and "ld.local" not in ptx and "st.local" not in ptx
        if os.path.exists(ptxas):
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(ptx)
            r = subprocess.run([ptxas, "-arch=sm_90", "-v", f.name, "-o", os.devnull],
                               capture_output=True, text=True)
            os.unlink(f.name)
            assert r.returncode == 0, r.stderr[-2000:]
            assert re.search(r"0 bytes stack frame, 0 bytes spill stores", r.stderr), r.stderr
print("ok")
'''


# the register kernels compiled for sm_90 with NVVM (no GPU needed), FP32/FP16/FP64,
# walls, inlet, outlet and force: valid for the real compiler (the simulator runs them
# as Python) and, assembled by ptxas where it is installed, with no local memory (no
# stack frame, no spills); ~30 s
@pytest.mark.slow
def test_register_kernels_compile_without_local_memory():
    from testsupport import compile_for_device

    assert compile_for_device(_PTX).strip().endswith("ok")
