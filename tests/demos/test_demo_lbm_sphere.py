"""demos/lbm/sphere.py through ``forestpy run``: a tiny sphere channel writes the
ParaView frames (.vtm slices + isosurface, .pvd), the force CSV, the wake PNG and the
report; bad options are usage errors."""

import json

import numpy as np
import pytest
from testsupport import ROOT

from forestpy.cli import main
from forestpy.io.vtk import read_pvd

DEMO = str(ROOT / "demos" / "lbm" / "sphere.py")
TINY = ["re=40", "diameter=6", "length=4", "width=2", "center=1.5", "speed=0.1",
        "t_final=2", "frames=2"]


@pytest.mark.slow  # the run, the frames and the offscreen PNG: ~10 s on 2 cores
def test_sphere_demo_writes_frames_forces_and_report(tmp_path):
    out = tmp_path / "sphere"
    args = ["run", DEMO, "--out", str(out)]
    for s in TINY:
        args += ["--set", s]
    assert main(args) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["grid"] == [24, 12, 12] and rep["steps"] == 120
    assert rep["tau"] == pytest.approx(0.5 + 3 * 0.1 * 6 / 40)
    assert rep["CD"] > 0 and rep["reference"]["CD"] == pytest.approx(1.75, abs=0.05)
    assert rep["compression_ratio"] is None and rep["nmse_density"] is None
    forces = np.loadtxt(out / "forces.csv", delimiter=",", skiprows=1)
    assert forces.shape == (120, 5)
    # the report's mean C_D is the mean of the CSV's last 40 % (window 0.4)
    assert rep["CD"] == pytest.approx(forces[-48:, 2].mean(), rel=1e-6)
    assert rep["frames"] == ["wake_0000.vtm", "wake_0001.vtm"]
    assert [t for t, _ in read_pvd(out / "wake.pvd")] == [1.0, 2.0]
    assert len(list((out / "wake_0001").glob("*.vti"))) == 2
    assert len(list((out / "wake_0001").glob("iso_*.vtp"))) == 1
    if rep["picture"] is not None:
        assert (out / "wake.png").stat().st_size > 5_000
    else:  # no off-screen renderer here: the report says why
        assert rep["picture_error"]


def test_sphere_demo_bad_options(tmp_path):
    assert main(["run", DEMO, "--set", "re=-1", "--out", str(tmp_path / "a")]) == 2
    assert main(["run", DEMO, "--set", "dtype=int8", "--out", str(tmp_path / "b")]) == 2
    assert main(["run", DEMO, "--set", "center=9.5", "--out", str(tmp_path / "c")]) == 2
