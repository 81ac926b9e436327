"""demos/tworoe/circular_dam.py through ``forestpy run``: the seed's internal circular dam
break writes ParaView frames (.vtu + .pvd) and a report with conservation and symmetry."""

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from testsupport import ROOT, load_demo

from forestpy.cli import main


def test_circular_dam_demo_writes_frames_and_report(tmp_path):
    out = tmp_path / "dam"
    rc = main(["run", str(ROOT / "demos" / "tworoe" / "circular_dam.py"), "--set",
               "cells=4016", "--set", "frames=2", "--out", str(out)])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["t"] == pytest.approx(0.1) and report["steps"] > 10
    assert abs(report["cells"] / 4016 - 1) <= 0.005
    assert max(report["mass_rel_change"]) <= 1e-13
    assert report["seed_gtx480_s"] == 0.0068 and report["cell_updates_per_s"] > 0
    assert report["interface_radial_spread"] < 0.05 * report["interface_jump"]
    if report["picture"] is not None:
        assert (out / "interface.png").stat().st_size > 10_000
    else:  # no off-screen renderer here: the report says why
        assert report["picture_error"]
    sets = ET.parse(out / "frame.pvd").getroot().findall(".//DataSet")
    assert [float(d.get("timestep")) for d in sets] == pytest.approx([0.0, 0.05, 0.1])
    vtk = pytest.importorskip("vtk")
    from vtk.util.numpy_support import vtk_to_numpy

    r = vtk.vtkXMLUnstructuredGridReader()
    r.SetFileName(str(out / sets[-1].get("file")))
    r.Update()
    grid = r.GetOutput()
    assert grid.GetNumberOfCells() == report["cells"]
    cd = grid.GetCellData()
    names = {cd.GetArrayName(i) for i in range(cd.GetNumberOfArrays())}
    assert {"h1", "h2", "u1", "u2", "interface", "surface"} <= names
    h1 = vtk_to_numpy(cd.GetArray("h1"))
    surface = vtk_to_numpy(cd.GetArray("surface"))
    assert h1.min() == pytest.approx(report["h1_min"]) and np.abs(surface).max() < 0.05
    assert vtk_to_numpy(cd.GetArray("u1")).shape == (report["cells"], 3)


@pytest.mark.slow  # compiles the 1D reference (a few seconds) and runs two solutions
def test_lock_exchange_demo_matches_the_1d_reference(tmp_path):
    demo = load_demo("tworoe/lock_exchange")
    rep = demo.main(out=str(tmp_path / "lock"), nx=100, ny=2, t_final=4.0, frames=1,
                    reference_cells=1000)
    assert max(rep["mass_rel_change"]) <= 1e-13
    assert rep["interface_l1_change"] > 0.05  # the bores left the lock
    assert rep["interface_l1_error"] < 0.2 * rep["interface_l1_change"]
    dx = 10.0 / 100
    for a, b in zip(rep["bores"], rep["bores_reference"]):
        assert abs(a - b) <= 2 * dx
    # the dense water went right, the light water left, at more than half the internal
    # speed at mid-depth
    left, right = rep["bores"]
    reach = 0.5 * rep["internal_speed"] * 4.0
    assert left < 5.0 - reach and 5.0 + reach < right
    assert (tmp_path / "lock" / "frame.pvd").exists()
