"""solvers/tworoe/distributed.py: the partition, the three-block layout and its exchange
lists, and 1 rank = 2 ranks = 3 ranks bitwise under mpirun (CPU; and the GPU path, in the
CUDA simulator, on 1 and 2 ranks)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from forestpy.solvers.tworoe import DepthError, TwoLayerSolver, disc_in_square, strip
from forestpy.solvers.tworoe.distributed import DistributedSolver, RankLayout, partition_cells
from testsupport import mpirun

from forestpy.backend import cuda_simulator_enabled

SCRIPT = Path(__file__).parent / "scripts" / "mpi_dam.py"


@pytest.fixture(scope="module")
def mesh():
    return disc_in_square(4016, order="hilbert")


def _edge_cut(mesh, part):
    nb = mesh.neighbours
    inner = nb >= 0
    return int((part[np.nonzero(inner)[0]] != part[nb[inner]]).sum()) // 2


@pytest.mark.parametrize("size", [2, 3, 4])
def test_metis_partition_is_balanced_and_cuts_fewer_edges_than_the_hilbert_split(mesh, size):
    pytest.importorskip("pymetis")
    metis = partition_cells(mesh, size, "metis")
    counts = np.bincount(metis, minlength=size)
    assert counts.min() > 0 and counts.max() <= 1.05 * mesh.num_cells / size
    assert _edge_cut(mesh, metis) < _edge_cut(mesh, partition_cells(mesh, size, "sfc"))
    assert (partition_cells(mesh, size) == metis).all()  # "auto" takes METIS when present


@pytest.mark.parametrize("size", [2, 3, 5])
def test_layouts_fit_together(mesh, size):
    part = partition_cells(mesh, size, "sfc")
    counts = np.bincount(part, minlength=size)
    assert counts.max() - counts.min() <= 1
    lays = [RankLayout(mesh, part, p) for p in range(size)]
    owned = np.concatenate([lay.cells[:lay.n_owned] for lay in lays])
    assert sorted(owned.tolist()) == list(range(mesh.num_cells))
    for lay in lays:
        p = lay.rank
        assert (part[lay.cells[:lay.n_owned]] == p).all()
        # block 1 has no foreign neighbour, block 2 has one, the halo is foreign
        nb = mesh.neighbours[lay.cells[:lay.n_owned]]
        foreign = (nb >= 0) & (part[np.maximum(nb, 0)] != p)
        assert not foreign[:lay.n_interior].any() and foreign[lay.n_interior:].any(axis=1).all()
        assert (part[lay.cells[lay.n_owned:]] != p).all()
        # what p sends to q is, in order, q's halo group from p
        for q, ix in lay.send.items():
            a, b = lays[q].recv[p]
            assert np.array_equal(lay.cells[ix], lays[q].cells[a:b])
        assert set(lay.send) == set(lay.recv)
        # edges keep the global orientation; inner edges touch no halo cell
        ge = lay.edges
        assert np.array_equal(lay.cells[lay.el], mesh.edge_cells[ge, 0])
        inner = slice(0, lay.n_inner_edges)
        assert (lay.el[inner] < lay.n_owned).all() and (lay.er[inner] < lay.n_owned).all()
        assert np.array_equal(lay.edges[lay.cell_edges],
                              mesh.cell_edges[lay.cells[:lay.n_owned]])


def test_one_rank_is_the_serial_solver(mesh):
    r = np.hypot(*mesh.centroid.T)
    h1 = np.where(r > 1.5, 4.0, 0.5)
    a = TwoLayerSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9)
    b = DistributedSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9)
    a.run(0.05)
    b.run(0.05)
    assert np.array_equal(b.gather(), a.W) and a.steps == b.steps


def _serial(cells):
    mesh = disc_in_square(cells, order="hilbert", tol=0.005 if cells >= 4000 else 0.2)
    r = np.hypot(*mesh.centroid.T)
    h1 = np.where(r > 1.5, 4.0, 0.5)
    return mesh, h1


def test_device_path_of_one_rank_is_the_serial_solver():
    """The GPU step of the distributed solver (streams ordered by events, the clock on
    the device) in the CUDA simulator: bitwise the CPU's; the host waits on the device
    once per step (the local dt, for the Allreduce), once per depth check (every
    ``sync_every`` steps and at the end) and once to write the clock of a run."""
    mesh, h1 = _serial(200)
    a = TwoLayerSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9)
    b = DistributedSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9, backend="gpu", sync_every=2)
    a.run(0.05)
    b.run(0.05)
    assert a.steps == b.steps == 3
    assert b._dev.host_syncs == 1 + 3 + 2  # clock; dt of steps 1-3; checks at 2 and 3
    ctl = b._dev.ctl.copy_to_host()
    assert ctl[0] == b.t == a.t and ctl[4] == b.steps  # the device's clock: T, STEPS
    if cuda_simulator_enabled():
        assert np.array_equal(b.gather(), a.W)
    else:
        assert np.allclose(b.gather(), a.W, rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # mpirun: every rank compiles the kernels
@pytest.mark.parametrize("ranks,backend,cells", [(2, "cpu", 4016), (3, "cpu", 4016),
                                                 (2, "gpu", 200)])
def test_ranks_give_bitwise_the_serial_result(tmp_path, ranks, backend, cells):
    launcher = mpirun()
    if launcher is None:
        pytest.skip("no mpirun")
    mesh, h1 = _serial(cells)
    ref = TwoLayerSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9)
    ref.run(0.05)
    out = tmp_path / "w.npz"
    subprocess.run([launcher, "-n", str(ranks), sys.executable, str(SCRIPT), str(out),
                    backend, str(cells)], check=True, timeout=600)
    got = np.load(out)
    assert len(got["owned"]) == ranks and got["owned"].sum() == mesh.num_cells
    assert int(got["steps"]) == ref.steps
    if backend == "gpu" and not cuda_simulator_enabled():
        assert np.allclose(got["W"], ref.W, rtol=1e-12, atol=1e-12)
    else:
        assert np.array_equal(got["W"], ref.W)


@pytest.mark.parametrize("every", [1, 3])
def test_device_path_reports_a_depth_below_h_min_at_its_next_check(every):
    """The device path checks the smallest depth every ``sync_every`` steps (and at the
    end of a run): upper-layer water pulled apart at x = 0.6 is below h_min after the
    first step, found at step ``sync_every``."""
    mesh = strip(12, 2, length=1.2, width=0.2)
    x = mesh.centroid[:, 0]
    q1 = np.zeros((mesh.num_cells, 2))
    q1[:, 0] = np.where(x < 0.6, -0.3, 0.3)
    sim = DistributedSolver(mesh, 0.3, 0.7, 1.0, q1=q1, r=0.9, backend="gpu",
                            sync_every=every, h_min=0.29)
    with pytest.raises(DepthError, match=rf"below h_min = 0.29 by step {every} "):
        sim.run(1.0)
    assert sim.steps == every
