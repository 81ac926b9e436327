"""FP16 storage of the D3Q27 distributions (``dtype="float16"``, solvers/lbm/fp16.py):
the converters against NumPy's float16 on every half value and every tie, rest stays
rest, mass within the rounding bound of the store, the Poiseuille profile against FP32
and FP64, and the CUDA kernel (simulator) against the CPU kernel bit for bit."""

import numpy as np
import pytest
from forestpy.solvers.lbm import LBM, C
from forestpy.solvers.lbm.fp16 import SCALE, half_bits, half_value
from test_lbm import random_state


def test_converters_match_numpy_on_every_half_and_every_tie():
    bits = np.arange(65536, dtype=np.uint16)
    values = bits.view(np.float16).astype(np.float64)
    finite = np.isfinite(values)
    decoded = np.array([half_value(b) for b in bits])
    np.testing.assert_array_equal(decoded[finite], values[finite])
    assert np.isinf(decoded[(bits & 0x7FFF) == 0x7C00]).all()
    assert np.isnan(decoded[~finite & ((bits & 0x7FFF) != 0x7C00)]).all()
    # every finite half encodes to itself (signed zeros, subnormals included) ...
    np.testing.assert_array_equal([half_bits(v) for v in values[finite]], bits[finite])
    # ... and every midpoint between neighbours rounds to the even one, as NumPy does;
    # beyond 65504 + half an ulp: infinity
    pos = np.unique(values[finite & (values >= 0)])
    mids = (pos[1:] + pos[:-1]) / 2
    rng = np.random.default_rng(3)
    x = np.concatenate([mids, -mids, np.nextafter(mids, 0), np.nextafter(mids, 1e9),
                        rng.standard_normal(3000) * 10.0 ** rng.uniform(-12, 6, 3000),
                        [65519.99, 65520.0, 1e9, -1e9, np.nan]])
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    ours = np.array([half_bits(v) for v in x])
    nan = np.isnan(x)
    np.testing.assert_array_equal(ours[~nan], ref[~nan])
    assert ours[nan][0] == 0x7E00


def test_rest_stays_at_rest_and_uniform_flow_uniform():
    shape = (5, 4, 6)
    sim = LBM(shape, tau=0.7, collision="trt", dtype="float16")
    sim.run(9)
    assert np.all(sim.raw() == 0)  # h = f - w = 0 exactly: nothing to round
    u0 = np.array([0.04, -0.03, 0.02])
    u = np.broadcast_to(u0.reshape(3, 1, 1, 1), (3, *shape))
    sim = LBM(shape, tau=0.7, collision="trt", u=u, rho=1.01, dtype="float16")
    sim.run(10)
    v = sim.velocity()
    assert np.ptp(v, axis=(1, 2, 3)).max() == 0  # every cell the same bits
    # each step rounds every stored h_q by at most 2^-12 |h_q|, which moves u by at most
    # 2^-12 sum_q |c_q| |h_q| / rho; over 10 steps at most 10 times that
    h = np.abs(sim.raw()[:, 0, 0, 0].astype(np.float64) / SCALE)
    bound = 10 * 2.0**-12 * (np.abs(C).sum(axis=1) * h).sum() / 1.01
    assert 0 < np.abs(v[:, 0, 0, 0] - u0).max() <= bound


def test_mass_within_the_rounding_bound():
    """Every step stores each of the 27 populations of every cell once, rounded to
    nearest: an error of at most 2^-12 of its stored magnitude.  The mass can therefore
    move by at most sum over steps and values of 2^-12 |h|; for unbiased rounding the
    typical change is a random walk, ~sqrt(27 N T) times 2^-12 rms|h| / sqrt(3).  The
    test checks the hard bound and that the change is below 10 random-walk sigmas
    (and that FP16 does change it: a check that could not fail would say nothing)."""
    shape = (6, 5, 7)
    rho, u, solid = random_state(shape, 5, solid_fraction=0.2)
    sim = LBM(shape, tau=0.62, collision="trt", rho=rho, u=u, solid=solid, dtype="float16")
    m0 = sim.mass()
    steps, bound, sq = 40, 0.0, 0.0
    for _ in range(steps):
        sim.run(1)
        h = np.abs(sim.raw().astype(np.float64) / SCALE)
        bound += 2.0**-12 * h.sum()
        sq += (h * h).sum()
    dm = abs(sim.mass() - m0)
    sigma = 2.0**-12 * np.sqrt(sq / 3)
    assert dm <= bound
    assert dm <= 10 * sigma
    assert dm > 0  # it is a 16-bit store


def poiseuille(dtype, h=12, tau=1.0, umax=0.02):
    """Force-driven channel between bounce-back walls normal to y, flow along x, TRT
    with the magic 3/16 (exact parabola up to storage rounding), from rest to steady:
    the max profile error and the max cross flow, both relative to ``umax``."""
    solid = np.zeros((1, h + 2, 1), dtype=bool)
    solid[:, [0, h + 1]] = True
    nu = (tau - 0.5) / 3
    fx = 8 * nu * umax / h**2
    sim = LBM(solid.shape, tau=tau, collision="trt", force=(fx, 0, 0), solid=solid,
              dtype=dtype)
    sim.run(int(4 * h * h / nu))
    v = sim.velocity()
    y = np.arange(1, h + 1)
    exact = fx / (2 * nu) * (y - 0.5) * (h + 0.5 - y)
    return (np.abs(v[0, 0, 1:-1, 0] - exact).max() / umax,
            np.abs(v[1:, 0, 1:-1, 0]).max() / umax)


def test_poiseuille_fp16_against_fp32():
    e64, c64 = poiseuille("float64")
    e32, c32 = poiseuille("float32")
    e16, c16 = poiseuille("float16")
    assert e64 < 1e-11 and e32 < 1e-4
    # FP16 (11 significant bits): near the steady state the per-step change of a
    # population falls below half its ulp and the update stalls, so the profile stops
    # at an error ~ 2^-12 |h| / (nu k^2), growing with h^2 / nu (docs/lbm.md: 0.4 %,
    # 1.5 %, 5.8 % of umax at h = 6, 12, 24, tau = 1; FP32 2e-6).  Measured here
    # (h = 12): 1.5 % of umax, cross flow 2.3e-4 umax.
    assert 1e-3 < e16 < 0.03
    assert c16 < 1e-3 and c32 < 1e-6 and c64 < 1e-12


def test_fp16_gpu_equals_cpu_bit_for_bit():
    shape = (4, 3, 5)
    rng = np.random.default_rng(11)
    rho = 1 + 0.05 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((3, *shape))
    solid = rng.random(shape) < 0.25
    inlet = np.zeros(shape, dtype=bool)
    inlet[:, 0] = True
    outlet = np.zeros(shape, dtype=bool)
    outlet[:, -1] = True
    solid &= ~inlet & ~outlet
    kw = dict(tau=0.66, collision="trt", force=(1e-3, 2e-4, -5e-4), solid=solid,
              inlet=inlet, inlet_velocity=(0.01, 0.03, 0.0), inlet_density=1.02,
              outlet=outlet, outlet_density=0.98, outlet_normal=(0, 1, 0),
              rho=rho, u=u, dtype="float16")
    cpu = LBM(shape, backend="cpu", **kw)
    gpu = LBM(shape, backend="gpu", **kw)
    for steps in (1, 2):
        cpu.run(steps)
        gpu.run(steps)
        a, b = cpu.raw(), gpu.raw()
        assert a.dtype == b.dtype == np.float16
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    np.testing.assert_array_equal(cpu.velocity(), gpu.velocity())


def test_bad_dtype():
    with pytest.raises(ValueError, match="float16, float32 or float64"):
        LBM((4, 4, 4), tau=0.6, dtype="int16")


_PTX = r'''
from numba import cuda, types as T
from forestpy.solvers.lbm import fp16, gpu
i8, f8 = T.int64, T.float64
for k, dt in ((gpu.gpu_step_kernel(), T.float32), (gpu.gpu_step_kernel(), T.float64),
              (fp16.gpu_step_kernel16(), T.uint16)):
    sig = (T.Array(dt, 2, "C"), T.Array(T.uint8, 1, "C"), i8, i8, i8, i8, f8, f8, f8, f8,
           f8, f8, f8, f8, f8, f8, i8, i8, i8)
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    assert ".entry" in ptx
print("ok")
'''


# the step kernels (FP32, FP64, FP16 store) compiled for sm_90 with NVVM (no GPU needed):
# the simulator runs them as Python and cannot see a typing error that only the real
# compiler finds (it found one: math.floor is a float in CUDA); ~30 s
@pytest.mark.slow
def test_step_kernels_compile_for_the_device():
    from testsupport import compile_for_device

    assert compile_for_device(_PTX).strip().endswith("ok")
