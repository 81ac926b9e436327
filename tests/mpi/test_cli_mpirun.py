"""The command line under mpirun (``forestpy run`` on every rank, in the launches of
tests/mpi/conftest.py): against the serial command line run here."""

import json
from pathlib import Path

import numpy as np
import pytest
from mpi_scenarios import CLI_CHECKPOINTED, CLI_REPORT, CLI_RUN, DEMO, TWOROE, TWOROE_RUN

from forestpy.cli import main

pytest.importorskip("mpi4py")


def _read(path):
    return json.loads(Path(path).read_text())


@pytest.mark.mpi("cli_run_2")
def test_mpirun_forestpy_run_matches_the_serial_run(mpi, tmp_path):
    serial = tmp_path / "serial"
    assert main(["run", str(DEMO), *CLI_RUN, "--out", str(serial)]) == 0
    ranks = mpi("cli_run_2")
    assert [r["rc"] for r in ranks] == [0, 0]
    assert sum(r["stdout"].count("total wall") for r in ranks) == 1  # rank 0 alone prints
    s, p = _read(serial / "summary.json"), _read(mpi.out("cli_run_2") / "par" / "summary.json")
    assert p["mpi_ranks"] == 2
    assert p["steps"] == s["steps"] and p["patches_per_level"] == s["patches_per_level"]
    assert p["totals_final"] == s["totals_final"]  # bitwise


@pytest.mark.mpi("cli_checkpoint_2", "cli_restart_3")
def test_mpirun_restart_on_3_ranks_from_per_rank_checkpoints_of_2(mpi, tmp_path):
    # cli_checkpoint_2 writes a per-rank checkpoint every 2 steps (the last two kept: the rank
    # files of the others are removed with them); cli_restart_3 continues from the
    # oldest kept one on 3 ranks, to the serial run's final totals, bitwise
    serial = tmp_path / "serial"
    assert main(["run", str(DEMO), *CLI_CHECKPOINTED, "--out", str(serial)]) == 0
    par = mpi.out("cli_checkpoint_2") / "par"
    assert [r["rc"] for r in mpi("cli_checkpoint_2")] == [0, 0]
    kept = sorted(p.name for p in par.glob("checkpoint_0*.npz"))
    assert len(kept) == 2
    assert sorted(p.name for p in par.glob("checkpoint_*.ranks")) == [
        k.replace(".npz", ".ranks") for k in kept]
    assert all(len(list((par / k.replace(".npz", ".ranks")).iterdir())) == 2 for k in kept)
    ranks = mpi("cli_restart_3")
    assert [r["rc"] for r in ranks] == [0, 0, 0], ranks
    s, p = _read(serial / "summary.json"), _read(mpi.out("cli_restart_3") / "par" /
                                                  "summary.json")
    assert p["mpi_ranks"] == 3 and p["restart"]["file"].endswith(kept[0])
    assert p["steps"] == s["steps"] and p["patches_per_level"] == s["patches_per_level"]
    assert p["totals_final"] == s["totals_final"]  # bitwise


@pytest.mark.mpi("cli_report_3")
def test_mpirun_report_runs_on_rank_0_with_the_state_gathered_there(mpi, tmp_path):
    # the final totals are a reduction over the ranks (no gathered state); the report
    # runs on rank 0 alone, on the state gathered to rank 0 only: the serial values
    ranks = mpi("cli_report_3")
    assert [r["rc"] for r in ranks] == [0, 0, 0]
    demo, par = mpi.out("cli_report_3") / "reported_mpi.py", mpi.out("cli_report_3") / "par"
    serial = tmp_path / "serial"
    assert main(["run", str(demo), *CLI_REPORT, "--out", str(serial)]) == 0
    s, p = _read(serial / "summary.json"), _read(par / "summary.json")
    assert p["mpi_ranks"] == 3 and p["steps"] == s["steps"]
    assert p["totals_initial"] == s["totals_initial"]  # the distributed build: bitwise
    assert p["totals_final"] == s["totals_final"]
    assert p["report"].pop("built_distributed") and not s["report"].pop("built_distributed")
    assert p["report"] == s["report"] and p["report"]["rows"] == p["report"]["patches"] == 64
    assert sorted(f.name for f in par.glob("report_rank*")) == ["report_rank0.txt"]


def _cells(path) -> dict:
    """The cell arrays of a ``.vtu`` or ``.pvtu`` (VTK's readers)."""
    import vtk
    from vtk.util.numpy_support import vtk_to_numpy

    reader = (vtk.vtkXMLPUnstructuredGridReader() if str(path).endswith(".pvtu")
              else vtk.vtkXMLUnstructuredGridReader())
    reader.SetFileName(str(path))
    reader.Update()
    cd = reader.GetOutput().GetCellData()
    return {cd.GetArrayName(k): vtk_to_numpy(cd.GetArray(k))
            for k in range(cd.GetNumberOfArrays())}


@pytest.mark.slow  # both ranks compile the two-layer kernels, and the serial run
@pytest.mark.mpi("tworoe_cli_2")
def test_mpirun_forestpy_run_of_the_two_layer_dam_matches_the_serial_run(mpi, tmp_path):
    """``mpirun -n 2 forestpy run demos/tworoe/circular_dam.py``: a DistributedSolver,
    frames as .pvtu + pieces, gauges and report equal to the serial run's."""
    ranks = mpi("tworoe_cli_2")
    assert [r["rc"] for r in ranks] == [0, 0]
    assert sum(r["stdout"].count("wrote ") for r in ranks) == 1  # rank 0 alone prints
    serial = tmp_path / "serial"
    assert main(["run", str(TWOROE), *TWOROE_RUN, "--out", str(serial)]) == 0
    par = mpi.out("tworoe_cli_2") / "par"
    s, p = _read(serial / "report.json"), _read(par / "report.json")
    assert p["ranks"] == 2 and s["ranks"] == 1
    assert p["steps"] == s["steps"] > 3 and p["t"] == s["t"]
    assert p["interface_radial_spread"] == pytest.approx(s["interface_radial_spread"],
                                                         rel=1e-12)
    assert (p["h1_min"], p["h1_max"]) == (s["h1_min"], s["h1_max"])
    assert max(p["mass_rel_change"]) <= 1e-13
    assert (par / "gauges.csv").read_bytes() == (serial / "gauges.csv").read_bytes()
    assert "frame_0001.pvtu" in (par / "frame.pvd").read_text()
    assert sorted(f.name for f in par.glob("frame_0001_*.vtu")) == [
        "frame_0001_0000.vtu", "frame_0001_0001.vtu"]
    pytest.importorskip("vtk")
    got, ref = _cells(par / "frame_0001.pvtu"), _cells(serial / "frame_0001.vtu")
    order = np.argsort(got["global_cell"])
    for name in ("h1", "h2", "u1", "u2", "interface", "surface"):
        assert np.array_equal(got[name][order], ref[name]), name
