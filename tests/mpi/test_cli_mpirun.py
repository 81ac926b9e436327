"""The command line under mpirun (``forestpy run`` on every rank, in the launches of
tests/mpi/conftest.py): against the serial command line run here."""

import json
from pathlib import Path

import pytest
from mpi_scenarios import CLI_REPORT, CLI_RUN, DEMO

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
