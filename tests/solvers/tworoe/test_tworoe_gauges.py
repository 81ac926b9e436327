"""solvers/tworoe/gauges.py: a gauge at a cell's centroid reads exactly that cell's state
after every step (CPU; the GPU path's device buffer in the CUDA simulator, serial and
distributed, bitwise the CPU's); the CSV reads back with forestpy's gauge reader; points
on a node and outside the mesh.  Serial = 2 ranks: test_tworoe_output.py (mpirun)."""

import numpy as np
import pytest
from forestpy.solvers.tworoe import TwoLayerSolver, strip
from forestpy.solvers.tworoe.distributed import DistributedSolver
from forestpy.solvers.tworoe.gauges import FIELDS, TriangleGauges, locate_points

from forestpy.backend import cuda_simulator_enabled
from forestpy.callbacks import read_gauges

T_GPU = 0.024  # 3 steps


@pytest.fixture(scope="module")
def case():
    mesh = strip(12, 2, length=1.2, width=0.2)  # 48 triangles: the simulator is slow
    x = mesh.centroid[:, 0]
    h1 = np.where(x < 0.6, 0.6, 0.3)
    # cells next to the dam (they move at once), and one far from it
    near = np.flatnonzero(np.abs(x - 0.6) < 0.1)[:3]
    cells = np.r_[near, np.argmax(x)]
    points = {f"G{c}": tuple(mesh.centroid[c]) for c in cells}
    return mesh, h1, cells, points


def _solver(case, **kw):
    mesh, h1, _, _ = case
    return TwoLayerSolver(mesh, h1, 1.0 - h1, 1.0, r=0.9, **kw)


def test_a_gauge_at_a_centroid_reads_that_cell_after_every_step(case, tmp_path):
    mesh, _, cells, points = case
    sim = _solver(case)
    g = sim.add_gauges(points)
    assert np.array_equal(g.cells, cells)
    ref_t, ref_W = [sim.t], [sim.W[:, cells].copy()]
    while sim.t < 0.3:
        sim.step(0.3)
        ref_t.append(sim.t)
        ref_W.append(sim.W[:, cells].copy())
    t, W = g.samples()
    assert np.array_equal(t, ref_t) and np.array_equal(W, np.array(ref_W))
    assert len(t) == sim.steps + 1 > 10
    assert np.ptp(W[:, 0, 0]) > 0.01  # the gauge sees the dam break
    g.write(tmp_path / "gauges.csv")
    got = read_gauges(tmp_path / "gauges.csv")
    assert list(got) == list(points)
    f = sim.fields()
    last = {"h1": f["h1"], "h2": f["h2"], "u1x": f["u1"][:, 0], "u1y": f["u1"][:, 1],
            "u2x": f["u2"][:, 0], "u2y": f["u2"][:, 1], "interface": f["interface"],
            "surface": f["surface"]}
    for gid, c in zip(points, cells):
        s = got[gid]
        assert np.array_equal(s["t"], ref_t)
        assert (s["x"] == points[gid][0]).all() and (s["y"] == points[gid][1]).all()
        for name in FIELDS:  # the repr in the CSV reads back exactly
            assert s[name][-1] == last[name][c], name


def test_gpu_gauges_fill_a_device_buffer_equal_to_the_cpu_samples(case, monkeypatch):
    """Serial (batches of 2 steps, the buffer grown between them) and the distributed
    device path on one rank."""
    monkeypatch.setattr(TriangleGauges, "CAPACITY", 2)
    _, _, _, points = case
    cpu = _solver(case)
    gc = cpu.add_gauges(points)
    cpu.run(T_GPU)
    gpu = _solver(case, backend="gpu", sync_every=2)
    gg = gpu.add_gauges(points)
    gpu.run(T_GPU)
    mesh, h1, _, _ = case
    dist = DistributedSolver(mesh, h1, 1.0 - h1, 1.0, r=0.9, backend="gpu")
    gd = dist.add_gauges(points)
    dist.run(T_GPU)
    tc, Wc = gc.samples()
    assert len(tc) == 4 and np.ptp(Wc[:, 0, 0]) > 0  # 3 steps, and the first gauge moved
    for g in (gg, gd):
        t, W = g.samples()
        assert np.array_equal(t, tc)
        if cuda_simulator_enabled():
            assert np.array_equal(W, Wc)
        else:
            assert np.allclose(W, Wc, rtol=1e-12, atol=1e-12)


def test_points_on_nodes_and_outside_the_mesh(case):
    mesh = case[0]
    node = int(mesh.tris[20, 1])
    sharing = np.flatnonzero((mesh.tris == node).any(axis=1))
    assert len(sharing) > 1
    assert locate_points(mesh, [mesh.nodes[node]])[0] == sharing.min()
    with pytest.raises(ValueError, match=r"gauge point 1 at \(1.3, 0.1\) is outside the mesh"):
        _solver(case).add_gauges([(0.1, 0.1), (1.3, 0.1)])
    sim = _solver(case)
    with pytest.raises(ValueError, match="distinct"):
        sim.add_gauges({"a": (0.1, 0.1), 1: (0.1, 0.1), "1": (0.2, 0.1)})
    sim.add_gauges([(0.1, 0.1)])
    with pytest.raises(RuntimeError, match="gauges already"):
        sim.add_gauges([(0.1, 0.1)])
