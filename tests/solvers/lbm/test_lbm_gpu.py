"""The CUDA kernel (in Numba's CUDA simulator) against the CPU kernel: the same bits
after even and odd steps, with bounce-back, an inlet and an outlet, forcing, BGK and
TRT, FP64 and FP32."""

import numpy as np
import pytest
from forestpy.solvers.lbm import LBM


@pytest.mark.parametrize("collision,dtype", [("bgk", "float64"), ("trt", "float32")])
def test_gpu_equals_cpu_bit_for_bit(collision, dtype):
    shape = (4, 3, 5)
    rng = np.random.default_rng(11)
    rho = 1 + 0.05 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((3, *shape))
    solid = rng.random(shape) < 0.25
    inlet = np.zeros(shape, dtype=bool)
    inlet[:, 0] = True  # an inlet plane y = 0 and an outlet plane y = ny - 1
    outlet = np.zeros(shape, dtype=bool)
    outlet[:, -1] = True
    solid &= ~inlet & ~outlet
    kw = dict(tau=0.66, collision=collision, force=(1e-3, 2e-4, -5e-4), solid=solid,
              inlet=inlet, inlet_velocity=(0.01, 0.03, 0.0), inlet_density=1.02,
              outlet=outlet, outlet_density=0.98, outlet_normal=(0, 1, 0),
              rho=rho, u=u, dtype=dtype)
    cpu = LBM(shape, backend="cpu", **kw)
    gpu = LBM(shape, backend="gpu", **kw)
    for steps in (1, 2):  # after an even step, then after an odd and an even one
        cpu.run(steps)
        gpu.run(steps)
        a, b = cpu.raw(), gpu.raw()
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, b)
    assert gpu.t == 3
    np.testing.assert_array_equal(cpu.velocity(), gpu.velocity())
