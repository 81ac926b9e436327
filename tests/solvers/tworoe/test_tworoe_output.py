"""solvers/tworoe/output.py: frames of a distributed run, a ``.pvtu`` and one ``.vtu``
piece per rank, read back (VTK's readers) equal bitwise to the serial run's ``.vtu``;
the ``.pvd`` names the ``.pvtu`` files.  The same mpirun run's gauges
(solvers/tworoe/gauges.py): the file of 2 ranks is the serial one, byte for byte."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from forestpy.solvers.tworoe import TwoLayerSolver, disc_in_square
from forestpy.solvers.tworoe.distributed import partition_cells
from forestpy.solvers.tworoe.output import FrameWriter, write_piece, write_pvtu
from testsupport import mpirun

from forestpy.callbacks import read_gauges

GAUGES = {"centre": (0.0, 0.0), "dam": (1.5, 0.01), "inside": (0.3, -1.2),
          "corner": (-4.9, 4.9)}

pytest.importorskip("vtk")

SCRIPT = Path(__file__).parent / "scripts" / "mpi_dam.py"
FIELDS = ("h1", "h2", "u1", "u2", "interface", "surface", "bottom")


def read_frame(path) -> dict:
    """Cell arrays and the corner coordinates ``(cells, 3, 3)`` of a ``.vtu`` or
    ``.pvtu`` (the pieces appended in order)."""
    import vtk
    from vtk.util.numpy_support import vtk_to_numpy

    reader = (vtk.vtkXMLPUnstructuredGridReader() if str(path).endswith(".pvtu")
              else vtk.vtkXMLUnstructuredGridReader())
    reader.SetFileName(str(path))
    reader.Update()
    grid = reader.GetOutput()
    cd = grid.GetCellData()
    out = {cd.GetArrayName(k): vtk_to_numpy(cd.GetArray(k)).copy()
           for k in range(cd.GetNumberOfArrays())}
    pts = vtk_to_numpy(grid.GetPoints().GetData())
    conn = vtk_to_numpy(grid.GetCells().GetConnectivityArray()).reshape(-1, 3)
    out["corners"] = pts[conn]
    return out


def in_global_order(frame: dict) -> dict:
    order = np.argsort(frame["global_cell"])
    assert np.array_equal(frame["global_cell"][order], np.arange(len(order)))
    return {k: v[order] for k, v in frame.items()}


def assert_same_frame(pieces: dict, serial: dict):
    got = in_global_order(pieces)
    for name in (*FIELDS, "corners"):
        assert got[name].dtype == serial[name].dtype
        assert np.array_equal(got[name], serial[name]), name


@pytest.fixture(scope="module")
def small():
    mesh = disc_in_square(200, order="hilbert", tol=0.2)
    h1 = np.where(np.hypot(*mesh.centroid.T) > 1.5, 4.0, 0.5)
    return mesh, h1


def test_pieces_and_pvtu_read_back_as_the_whole_frame(small, tmp_path):
    mesh, h1 = small
    sim = TwoLayerSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9)
    for _ in range(5):
        sim.step()
    FrameWriter(tmp_path, "serial").write(sim)
    f = sim.fields()
    part = partition_cells(mesh, 3, "sfc")
    names = []
    for q in range(3):
        cells = np.flatnonzero(part == q)[::-1]  # any order: global_cell says where
        names.append(f"piece_{q}.vtu")
        write_piece(tmp_path / names[-1], mesh, cells, {k: v[cells] for k, v in f.items()},
                    sim.t, q)
    write_pvtu(tmp_path / "whole.pvtu", names, {k: v[:2] for k, v in f.items()})
    got = read_frame(tmp_path / "whole.pvtu")
    assert np.array_equal(got["rank"], np.repeat(np.arange(3), np.bincount(part)))
    assert_same_frame(got, read_frame(tmp_path / "serial_0000.vtu"))


@pytest.mark.slow  # mpirun: each rank compiles the kernels
def test_two_ranks_write_pieces_equal_to_the_serial_frames(small, tmp_path):
    launcher = mpirun()
    if launcher is None:
        pytest.skip("no mpirun")
    mesh, h1 = small
    ser = tmp_path / "serial"
    sim = TwoLayerSolver(mesh, h1, 5.0 - h1, 5.0, r=0.9)
    gauges = sim.add_gauges(GAUGES)
    w = FrameWriter(ser)
    w.write(sim)
    sim.run(0.05)
    w.write(sim)
    gauges.write(ser / "gauges.csv")
    dist = tmp_path / "dist"
    subprocess.run([launcher, "-n", "2", sys.executable, str(SCRIPT), str(tmp_path / "w.npz"),
                    "cpu", "200", "sfc", str(dist), json.dumps(GAUGES)], check=True, timeout=600)
    pvd = ET.parse(dist / "frame.pvd").getroot()
    files = [d.get("file") for d in pvd.iter("DataSet")]
    assert files == ["frame_0000.pvtu", "frame_0001.pvtu"]
    assert [float(d.get("timestep")) for d in pvd.iter("DataSet")] == [0.0, sim.t]
    assert sorted(p.name for p in dist.glob("*.vtu")) == [
        f"frame_000{k}_000{r}.vtu" for k in range(2) for r in range(2)]
    for k in range(2):
        got = read_frame(dist / f"frame_000{k}.pvtu")
        assert set(np.unique(got["rank"])) == {0, 1}
        assert_same_frame(got, read_frame(ser / f"frame_000{k}.vtu"))
    # gauges on both ranks (rank 0 owns the centre, rank 1 the corner): the same file
    owner = partition_cells(mesh, 2, "sfc")[gauges.cells]
    assert set(owner.tolist()) == {0, 1}
    assert (dist / "gauges.csv").read_text() == (ser / "gauges.csv").read_text()
    assert len(read_gauges(dist / "gauges.csv")["dam"]["t"]) == sim.steps + 1
