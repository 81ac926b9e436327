"""HWFV1 GPU kernels (run in the Numba CUDA simulator in CI): same results as the CPU."""

import numpy as np
import pytest
from forestpy.solvers.hwfv1.gpu import HWFV1GPU
from forestpy.solvers.hwfv1.solver import HWFV1
from hwfv1_states import beach_state, circular_state, tree_masks


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


# the adaptive run (~7 s in the CUDA simulator) is slow; the uniform one stays fast
@pytest.mark.parametrize("eps", [None, pytest.param(1e-3, marks=pytest.mark.slow)])
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


# slow: runs of many steps at L = 5 in the CUDA simulator (8-25 s each)
@pytest.mark.slow
@pytest.mark.parametrize("case, eps, t_final, sparse", [
    ("circular", 1e-2, 0.6, True),  # wet, flat bed: every step after the first O(nodes)
    ("beach", 1e-2, 1.0, True),     # wet/dry leaves whose projection stays flat
    ("beach", 5e-2, 1.5, False),    # coarse leaves with clipped projections: full MRA
])
def test_tree_node_mra_equals_the_full_finest_algorithm(case, eps, t_final, sparse):
    """L = 5 (two encode launches in the simulator): the GPU keeps coefficients only for
    the nodes of the tree and derives the rest; the CPU encodes all 4^L finest cells
    every step.  Same trees (leaf counts every step), same states to round-off, and the
    GPU took the O(nodes) path where the projection is flat."""
    h, z, ext = circular_state() if case == "circular" else beach_state()
    zero = np.zeros_like(h)
    kw = dict(extent=ext, eps=eps, bc="wall", n_manning=0.02)
    cpu = HWFV1(h, zero, zero, z, **kw).run(t_final)
    gpu = HWFV1GPU(h, zero, zero, z, **kw).run(t_final)
    assert gpu.steps == cpu.steps > 3 and gpu.leaf_history == cpu.leaf_history
    assert gpu.full_steps >= 1 and gpu.sparse_steps + gpu.full_steps == gpu.steps
    if sparse:
        assert gpu.sparse_steps == gpu.steps - 1  # only the first step encodes everything
    else:
        assert gpu.full_steps > 1
    assert cpu.nleaves < h.size
    for a, b in zip(cpu.state(), gpu.state()):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)


# slow: ~8-10 s in the CUDA simulator
@pytest.mark.slow
def test_nodes_outside_the_tree_are_never_read():
    """After a few steps, poison (NaN) the coefficients and leaf values of every node
    that is not a leaf or an ancestor of a leaf; the next O(nodes) steps must not see
    them (the result equals the CPU's)."""
    from forestpy.solvers.hwfv1.gpu import MODE, PAR, SPARSE

    h, z, ext = circular_state()
    zero = np.zeros_like(h)
    kw = dict(extent=ext, eps=1e-3, bc="wall")
    cpu = HWFV1(h, zero, zero, z, **kw)
    gpu = HWFV1GPU(h, zero, zero, z, **kw)
    for _ in range(2):
        cpu.step()
        gpu.step()
    ctl = gpu.ctl.copy_to_host()
    assert ctl[MODE] == SPARSE
    L = gpu.L
    sig = gpu.sigs.copy_to_host()[ctl[PAR]].astype(bool)
    in_tree, leaf = tree_masks(sig, L)
    assert 0 < leaf.sum() == gpu.nleaves < 4**L
    s = gpu.s.copy_to_host()
    s[:3, ~in_tree] = np.nan
    gpu.s.copy_to_device(s)
    newv = gpu.newv.copy_to_host()
    newv[:, ~leaf] = np.nan
    gpu.newv.copy_to_device(newv)
    for _ in range(2):
        assert gpu.step() == pytest.approx(cpu.step(), rel=1e-14)
    assert gpu.leaf_history == cpu.leaf_history and gpu.sparse_steps == 3
    for a, b in zip(cpu.state(), gpu.state()):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
