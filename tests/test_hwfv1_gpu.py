"""HWFV1 GPU kernels (run in the Numba CUDA simulator in CI): same results as the CPU."""

import numpy as np
import pytest
from forestpy.solvers.hwfv1.gpu import HWFV1GPU
from forestpy.solvers.hwfv1.solver import HWFV1


def humps_state(n=8):
    x = (np.arange(n) + 0.5) * 70.0 / n
    y = (np.arange(n) + 0.5) * 30.0 / n
    X, Y = np.meshgrid(x, y)
    z = np.maximum(0.0, 1.0 - 0.1 * np.hypot(X - 30.0, Y - 6.0))
    h = np.where(X < 16.0, np.maximum(0.0, 1.875 - z), 0.0)  # dam break onto a dry bed
    return h, z


@pytest.mark.parametrize("eps", [None, 1e-3, 0.0])
def test_gpu_kernels_match_cpu(eps):
    h, z = humps_state()
    zero = np.zeros_like(h)
    kw = dict(extent=(0.0, 70.0, 0.0, 30.0), eps=eps, bc=("open", "wall", "wall", "wall"),
              n_manning=0.018)
    cpu = HWFV1(h, zero, zero, z, **kw)
    gpu = HWFV1GPU(h, zero, zero, z, **kw)
    for _ in range(3):
        assert gpu.step() == pytest.approx(cpu.step(), rel=1e-14)
    if eps is not None:
        assert gpu.nleaves == cpu.nleaves
        if eps > 0:
            assert cpu.nleaves < h.size  # adaptivity is exercised
    for a, b in zip(cpu.state(), gpu.state()):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    assert np.abs(cpu.state()[1]).max() > 0.1  # the flow moved


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_gpu_run_batches_steps_on_the_device_and_matches_cpu(eps):
    """``run`` launches several steps between clock read-backs (dt, t, leaf counts stay
    on the device); steps launched after t_final must do nothing."""
    h, z = humps_state()
    zero = np.zeros_like(h)
    kw = dict(extent=(0.0, 70.0, 0.0, 30.0), eps=eps, bc=("open", "wall", "wall", "wall"),
              n_manning=0.018)
    cpu = HWFV1(h, zero, zero, z, **kw).run(3.0)
    gpu = HWFV1GPU(h, zero, zero, z, **kw).run(3.0)
    assert gpu.t == cpu.t == 3.0 and gpu.steps == cpu.steps > 3
    if eps is not None:
        assert gpu.leaf_history == cpu.leaf_history
    for _ in range(2):  # launched past t_final: no-ops
        gpu._launch(3.0)
    assert gpu._sync() == 0.0 and gpu.steps == cpu.steps
    for a, b in zip(cpu.state(), gpu.state()):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
