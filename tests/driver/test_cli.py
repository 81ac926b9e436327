"""Tests of the ``forestpy`` command line and of the JSON summary writer.

Runs happen in-process through ``forestpy.cli.main`` (Numba compiles each Riemann
solver once per process); exactly one test runs the console script in a subprocess,
started at the beginning of the module so that its compilation overlaps the others.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from testsupport import ROOT, demo_file

from forestpy.cli import main
from forestpy.io.summary import to_jsonable, write_json_atomic

DEMO = ROOT / "demos" / "radial_dam.py"
SMALL = ["--set", "max_level=2", "--set", "min_level=2", "--set", "t_final=0.05", "--set", "mx=8"]
SUMMARY_KEYS = {
    "demo", "backend", "steps", "t_final", "cell_updates", "wall_s", "cell_updates_per_s",
    "patches_per_level", "totals_initial", "totals_final", "timers", "command",
    "forestpy_version", "status",
}


def _console_script() -> list[str]:
    exe = Path(sys.executable).with_name("forestpy")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from forestpy.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module", autouse=True)
def console_run(tmp_path_factory):
    """Start ``forestpy run`` in a subprocess now; the end-to-end test waits for it."""
    out = tmp_path_factory.mktemp("console") / "radial"
    cmd = [*_console_script(), "run", str(DEMO), *SMALL, "--set", "cfl=0.8", "--out", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(out.parent)
    )
    yield proc, out
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _read(path):
    return json.loads(Path(path).read_text())


# --------------------------------------------------------------------------- run
def test_run_writes_summary_and_options(tmp_path, capsys):
    out = tmp_path / "radial"
    rc = main(["run", str(DEMO), *SMALL, "--set", "refine_threshold=0.03", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "total wall" in captured.out and "cell updates/s" in captured.out
    assert "patches per level" in captured.out
    assert "100%" in captured.err  # non-tty progress: short lines

    s = _read(out / "summary.json")
    assert SUMMARY_KEYS <= set(s)
    assert s["status"] == "ok" and s["demo"] == "radial_dam" and s["backend"] == "cpu"
    assert s["command"][:2] == ["forestpy", "run"] and "max_level=2" in s["command"]
    assert s["steps"] > 0 and s["cell_updates"] > 0
    assert s["t_final"] == pytest.approx(0.05)
    assert s["patches_per_level"] == {"2": 16}
    assert set(s["totals_initial"]) == set(s["totals_final"]) == {"h", "hu", "hv"}
    assert s["totals_final"]["h"] == pytest.approx(s["totals_initial"]["h"], rel=1e-12)
    assert {"ghost_fill", "step", "regrid"} <= set(s["timers"])

    o = _read(out / "options_used.json")
    assert set(o["demo_options"]) == {
        "mx", "min_level", "max_level", "refine_threshold", "regrid_interval", "t_final",
        "solver", "cfl", "backend", "dtype", "subcycle", "precision",
    }
    assert o["demo_options"]["mx"] == 8 and o["demo_options"]["t_final"] == 0.05
    assert o["demo_options"]["refine_threshold"] == 0.03
    assert o["demo_options"]["solver"] == "roe"  # defaults are written too
    assert o["overrides"] == {"max_level": 2, "min_level": 2, "t_final": 0.05, "mx": 8,
                              "refine_threshold": 0.03}
    sim_opts = o["simulation_options"]
    assert sim_opts["mx"] == 8 and sim_opts["max_level"] == 2
    assert sim_opts["refine_threshold"] == 0.03 and sim_opts["riemann"] == "shallow_roe"
    assert sim_opts["dt_max"] == "inf"  # non-finite floats stay strict JSON
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_unknown_key_is_usage_error(tmp_path, capsys):
    rc = main(["run", str(DEMO), "--set", "max_levle=3", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "max_levle" in err and "max_level" in err and "refine_threshold" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--set", "max_level"], ["KEY=VALUE", "max_level"]),
        (["--set", "=3"], ["KEY=VALUE"]),
        (["--set", "mx=eight"], ["mx", "eight"]),
    ],
)
def test_malformed_set(tmp_path, capsys, args, words):
    rc = main(["run", str(DEMO), *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert all(w in err for w in words) and "Traceback" not in err


def test_bad_demo_files(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert "not found" in capsys.readouterr().err
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    assert main(["run", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "OPTIONS" in err and "setup" in err and "Traceback" not in err


def test_backend_gpu_without_gpu_is_clear_error(tmp_path, capsys, monkeypatch):
    import numba
    from numba import cuda

    monkeypatch.setattr(numba.config, "ENABLE_CUDASIM", False)
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    out = tmp_path / "gpu"
    rc = main(["run", str(DEMO), *SMALL, "--backend", "gpu", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc != 0
    assert "GPU backend needs an NVIDIA GPU" in err and "Traceback" not in err
    s = _read(out / "summary.json")
    assert s["status"] == "failed" and "GPU" in s["error"]
    assert _read(out / "options_used.json")["demo_options"]["backend"] == "gpu"


def test_backend_needs_backend_option(tmp_path, capsys):
    demo = tmp_path / "nobackend.py"
    demo.write_text("OPTIONS = dict(mx=8)\n\ndef setup(**o):\n    raise AssertionError\n")
    assert main(["run", str(demo), "--backend", "cpu", "--out", str(tmp_path / "o")]) == 2
    assert "no 'backend' option" in capsys.readouterr().err


def test_negative_depth_at_setup_fails_cleanly(tmp_path, capsys):
    demo = demo_file(
        tmp_path,
        """
        def qinit(x, y):
            return np.stack([np.where(x > 0.5, -1.0, 1.0), 0 * x, 0 * x])
        """,
    )
    out = tmp_path / "out"
    rc = main(["run", str(demo), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "StateError" in err and "negative 'h'" in err and "Traceback" not in err
    s = _read(out / "summary.json")
    assert s["status"] == "failed" and "negative 'h'" in s["error"]
    assert s["error_type"] == "StateError" and s["failed_in"] == "setup"
    assert s["forestpy_version"] and s["command"][0] == "forestpy"


@pytest.mark.parametrize("content", [b"II*\x00\x08\x00", b"ncols nan\nnrows 2\n"])
def test_bad_input_file_in_setup_is_a_usage_error(tmp_path, capsys, content):
    """An input file the demo reads in setup (here a raster) that cannot be read: one
    line naming it, exit code 2, and nothing written, not even the output folder."""
    bad = tmp_path / ("topo.tif" if content.startswith(b"II") else "topo.asc")
    bad.write_bytes(content)
    demo = demo_file(tmp_path, f"""
        from forestpy.extensions.geoclaw.rasters import read_raster
        _qinit = qinit

        def qinit(x, y):
            read_raster({str(bad)!r})
            return _qinit(x, y)
        """)
    out = tmp_path / "new" / "out"
    assert main(["run", str(demo), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RasterError" in err[0] and str(bad) in err[0], err
    assert not (tmp_path / "new").exists()


def test_nan_during_run_fails_cleanly(tmp_path, capsys):
    demo = demo_file(
        tmp_path,
        """
        def src2(q, aux, x, y, t, dt):
            if t > 0.0:
                q[:, 0] = np.nan
        """,
    )
    out = tmp_path / "out"
    rc = main(["run", str(demo), "--out", str(out), "--set", "t_final=1.0"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "NaN" in err and "Traceback" not in err
    s = _read(out / "summary.json")
    assert s["status"] == "failed" and s["failed_in"] == "run" and "NaN" in s["error"]
    assert s["steps"] == 1  # the summary of the state before the failure
    assert set(s["totals_final"]) == {"h", "hu", "hv"}
    assert _read(out / "options_used.json")["simulation_options"]["t_final"] == 1.0


def test_list_solvers(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "shallow_roe" in out and "shallow_hlle" in out


def test_no_command_prints_usage(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


# --------------------------------------------------------------------------- io
def test_to_jsonable():
    obj = {
        1: np.float32(0.5),
        "a": (np.int64(3), np.arange(3)),
        "f": np.sin,
        "inf": float("inf"),
        "b": np.bool_(True),
        "p": Path("x/y"),
    }
    j = to_jsonable(obj)
    assert j["1"] == 0.5 and j["a"] == [3, [0, 1, 2]] and j["inf"] == "inf"
    assert j["b"] is True and j["p"] == "x/y" and "sin" in j["f"]
    json.dumps(j, allow_nan=False)


def test_write_json_atomic_keeps_old_file_on_error(tmp_path):
    path = tmp_path / "sub" / "s.json"
    write_json_atomic(path, {"ok": 1})
    assert _read(path) == {"ok": 1}

    class Boom:
        def __repr__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_json_atomic(path, {"bad": Boom()})
    assert _read(path) == {"ok": 1}
    assert sorted(os.listdir(path.parent)) == ["s.json"]


# --------------------------------------------------------------------------- console script
def test_console_script_end_to_end(console_run):
    proc, out = console_run
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    assert "total wall" in stdout and "cell updates/s" in stdout
    s = _read(out / "summary.json")
    assert s["status"] == "ok" and s["steps"] > 0
    assert s["command"][1:3] == ["run", str(DEMO)]
    o = _read(out / "options_used.json")
    assert o["demo_options"]["cfl"] == 0.8 and o["simulation_options"]["cfl_desired"] == 0.8


def test_plot_and_output_flags_reject_bad_input(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "no such output folder" in capsys.readouterr().err
    assert main(["plot", str(tmp_path)]) == 2  # a folder without a .pvd
    assert "no .pvd collection" in capsys.readouterr().err
    for flags, match in [(["--output-interval", "0"], "--output-interval must be > 0"),
                         (["--output-steps", "0"], "--output-steps must be >= 1"),
                         (["--output-times", "x"], "--output-times expects")]:
        assert main(["run", str(DEMO), *flags, "--out", str(tmp_path / "o")]) == 2
        assert match in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written before the error


# --------------------------------------------------------------------------- report, main, MPI
def test_report_hook_is_called_after_the_run(tmp_path, capsys):
    demo = demo_file(tmp_path, """
        def report(sim, out):
            (out / "gauge.csv").write_text("t,h\\n")
            return {"mass": sim.totals()["h"], "t": sim.t}
        """, name="reported.py")
    out = tmp_path / "o"
    rc = main(["run", str(demo), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    rep = _read(out / "report.json")
    assert rep["mass"] == pytest.approx(4.0, rel=1e-12) and rep["t"] == pytest.approx(0.05)
    assert _read(out / "summary.json")["report"] == rep
    assert (out / "gauge.csv").exists() and '"mass"' in captured.out


def test_failing_report_is_reported_as_such(tmp_path, capsys):
    demo = demo_file(tmp_path, """
        def report(sim, out):
            raise ValueError("measured file missing")
        """, name="badreport.py")
    out = tmp_path / "o"
    rc = main(["run", str(demo), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "during report" in err and "measured file missing" in err
    assert _read(out / "summary.json")["status"] == "failed"


STANDALONE = """
from forestpy.options import Option, merge_options

OPTIONS = dict(n=Option(4, "cells", min=1), backend="cpu")

def main(out, **overrides):
    o = merge_options(OPTIONS, overrides, "standalone")
    (out / "field.txt").write_text("x" * o["n"])
    return {"n": o["n"], "sum": float(sum(range(o["n"])))}
"""


def test_standalone_demo_runs_main_with_the_output_folder(tmp_path, capsys):
    demo = tmp_path / "standalone.py"
    demo.write_text(STANDALONE)
    out = tmp_path / "o"
    rc = main(["run", str(demo), "--set", "n=6", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert _read(out / "report.json") == {"n": 6, "sum": 15.0}
    assert (out / "field.txt").read_text() == "x" * 6
    assert _read(out / "options_used.json")["overrides"] == {"n": 6}
    assert _read(out / "summary.json")["status"] == "ok"
    # typed options still validated, and Simulation-only flags refused
    assert main(["run", str(demo), "--set", "n=0", "--out", str(out)]) == 2
    assert main(["run", str(demo), "--checkpoint-interval", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "n" in err and "--checkpoint-interval" in err and "not a Simulation" in err


def test_mpi_world_size_from_launcher_environment(monkeypatch):
    from forestpy.cli import mpi_world_size

    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID", "PMIX_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert mpi_world_size() == 1
    monkeypatch.setenv("SLURM_NTASKS", "4")  # an sbatch allocation, outside srun's tasks
    assert mpi_world_size() == 1
    monkeypatch.setenv("SLURM_PROCID", "2")
    assert mpi_world_size() == 4
    monkeypatch.setenv("PMI_SIZE", "3")
    assert mpi_world_size() == 3


def test_standalone_demo_bad_input_file_leaves_nothing(tmp_path, capsys):
    demo = tmp_path / "reads.py"
    demo.write_text(
        "from forestpy.callbacks import read_gauges\n"
        "OPTIONS = dict(path='')\n"
        "def main(out, **overrides):\n"
        "    return read_gauges(overrides['path'])\n"
    )
    bad = tmp_path / "g.csv"
    bad.write_text("t,gauge,x,y,h\n0.0,1,0.0,0.0,abc\n")
    out = tmp_path / "o"
    assert main(["run", str(demo), "--set", f"path={bad}", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "InputFileError" in err[0] and "line 2" in err[0], err
    assert not out.exists()


def test_compilation_is_announced_and_reported_apart(tmp_path, capsys):
    # a demo whose setup compiles a Numba function of its own (no disk cache): the
    # notice comes before it, the summary keeps the compilation time apart from the rate
    demo = demo_file(tmp_path, """
        import numba

        def qinit(x, y):
            h = numba.njit(lambda a: a * 0.0 + 1.0)(x)
            return np.stack([h, np.zeros_like(x), np.zeros_like(x)])
        """, name="jit_demo.py")
    out = tmp_path / "o"
    rc = main(["run", str(demo), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    notice = "forestpy: compiling kernels for demo jit_demo (first run on this machine; " \
             "cached for later runs) ..."
    assert captured.err.splitlines()[0] == notice
    summary = _read(out / "summary.json")
    assert summary["setup_compile_s"] > 0 and summary["compile_s"] >= 0
    assert "compiling kernels took" in captured.out
    assert "(startup and compilation excluded)" in captured.out


STANDALONE_STEPS = """
from forestpy.callbacks import report_step
from forestpy.options import Option, merge_options

OPTIONS = dict(n=Option(4, "steps", min=1))

class Solver:
    t, steps, t_final = 0.0, 0, 1.0

def main(out, **overrides):
    o = merge_options(OPTIONS, overrides, "stepper")
    s = Solver()
    for _ in range(o["n"]):
        s.t += 1.0 / o["n"]
        s.steps += 1
        report_step(s)
    return {"steps": s.steps}
"""


def test_standalone_demo_shows_progress(tmp_path, capsys):
    demo = tmp_path / "stepper.py"
    demo.write_text(STANDALONE_STEPS)
    assert main(["run", str(demo), "--set", "n=5", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [ln.split("%")[0].strip() for ln in err] == ["20", "40", "60", "80", "100"]
    assert err[-1].startswith("100%  t=1/1  step 5")


# --------------------------------------------------------------------------- bad output
def _frames_folder(tmp_path) -> Path:
    """A folder with a .pvd (the checks below come before any frame is read)."""
    folder = tmp_path / "frames"
    folder.mkdir()
    (folder / "frame.pvd").write_text(
        '<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1"><Collection>'
        '<DataSet timestep="0" file="frame_0000.vtm"/></Collection></VTKFile>\n')
    return folder


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "Traceback" not in err[0], err
    for w in words:
        assert w in err[0], err
    return err[0]


@pytest.mark.parametrize("command", ["run", "png", "movie"])
def test_unwritable_output_is_one_line_and_exit_2(tmp_path, capsys, command):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    frames = _frames_folder(tmp_path)
    if command == "run":
        argv = ["run", str(DEMO), *SMALL, "--out", str(blocker / "out")]
    elif command == "png":
        argv = ["plot", str(frames), "--png", str(blocker / "x.png")]
    else:
        argv = ["plot", str(frames), "--movie", str(blocker / "x.gif")]
    assert main(argv) == 2
    _one_error_line(capsys, "cannot write in this folder", str(blocker))
    assert blocker.read_text() == "not a folder"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs POSIX permissions and a non-root user")
def test_read_only_output_folders(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    frames = _frames_folder(tmp_path)
    ro.chmod(0o555)
    frames.chmod(0o555)
    try:
        assert main(["run", str(DEMO), *SMALL, "--out", str(ro)]) == 2
        _one_error_line(capsys, "--out", "Permission denied")
        assert main(["plot", str(frames)]) == 2  # images go beside the frames
        _one_error_line(capsys, "--png FILE")
        assert main(["plot", str(frames), "--movie", str(ro / "m.gif")]) == 2
        _one_error_line(capsys, "--movie")
        assert not os.listdir(ro)
    finally:
        ro.chmod(0o755)
        frames.chmod(0o755)


def test_levels_beyond_the_forest_are_refused_up_front(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", str(DEMO), "--set", "max_level=19", "--out", str(out)]) == 2
    _one_error_line(capsys, "max_level", "<= 18", "19")
    assert not out.exists()


STANDALONE_GRID = """
import numpy as np
from forestpy.callbacks import report_start, report_step
from forestpy.options import Option, merge_options

OPTIONS = dict(n=Option(8, "steps", min=1))

class Solver:
    t, steps, t_final = 0.0, 0, 1.0
    def frame_fields(self):
        z = np.full((3, 4), self.t)
        return {"fields": {"depth": z, "u": 2 * z}, "lower": (0.0, 0.0),
                "spacing": (0.5, 0.5), "units": {"depth": "m", "x": "m", "t": "s"}}

def main(out, **overrides):
    o = merge_options(OPTIONS, overrides, "grid")
    s = Solver()
    report_start(s)
    for _ in range(o["n"]):
        s.t += 1.0 / o["n"]
        s.steps += 1
        report_step(s)
    return {"steps": s.steps}
"""


def test_standalone_demo_writes_frames(tmp_path, capsys):
    # --vtk for a solver outside the Simulation: its grid's frames, indexed by time
    pytest.importorskip("vtkmodules")
    from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader

    from forestpy.io.vtk import read_pvd

    demo = tmp_path / "grid.py"
    demo.write_text(STANDALONE_GRID)
    out = tmp_path / "o"
    assert main(["run", str(demo), "--out", str(out), "--vtk", "flat", "--output-interval",
                 "0.25", "--quiet"]) == 0, capsys.readouterr().err
    entries = read_pvd(out / "frame.pvd")
    assert [t for t, _ in entries] == [0.0, 0.25, 0.5, 0.75, 1.0]
    reader = vtkXMLMultiBlockDataReader()
    reader.SetFileName(str(out / entries[2][1]))
    reader.Update()
    grid = reader.GetOutput().GetBlock(0).GetBlock(0)
    assert grid.GetDimensions() == (5, 4, 1) and grid.GetSpacing()[:2] == (0.5, 0.5)
    depth = grid.GetCellData().GetArray("depth")
    assert depth.GetValue(0) == 0.5
    assert grid.GetFieldData().GetAbstractArray("units").GetValue(0) == "depth=m, x=m, t=s"
    # every 3 steps: the start, steps 3 and 6, the end
    out2 = tmp_path / "o2"
    assert main(["run", str(demo), "--out", str(out2), "--output-steps", "3", "--quiet"]) == 0
    assert [t for t, _ in read_pvd(out2 / "frame.pvd")] == [0.0, 0.375, 0.75, 1.0]
