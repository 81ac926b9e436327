"""Tests of the run callbacks: Progress, Gauges (+ read_gauges), Totals, OutputTimes."""

import io
import os
import stat
from types import SimpleNamespace

import numpy as np
import pytest
from testsupport import ROOT

from forestpy.callbacks import (
    SHALLOW_WATER_SI,
    Gauges,
    OutputTimes,
    Progress,
    Totals,
    progress_scope,
    read_gauges,
    report_step,
)
from forestpy.cli import load_demo

DEMO = ROOT / "demos" / "radial_dam.py"
POINTS = {0: (0.0, 0.0), 1: (0.6, 0.0), "edge": (2.4, -2.4)}


@pytest.fixture(scope="module")
def radial_run(tmp_path_factory):
    """One small radial-dam run carrying every callback."""
    path = tmp_path_factory.mktemp("gauges") / "gauges.csv"
    sim = load_demo(DEMO).setup(max_level=2, min_level=2, t_final=0.05, mx=8)
    gauges = Gauges(POINTS, path=path)
    depth = Gauges([(0.3, 0.3)], fields=["h"])
    totals = Totals()
    outputs = OutputTimes([0.0, 0.02, 0.05], lambda s: seen.append((s.t, s.steps)))
    seen: list = []
    stream = io.StringIO()
    sim.callbacks += [gauges, depth, totals, outputs, Progress(stream)]
    sim.run()
    return SimpleNamespace(sim=sim, gauges=gauges, depth=depth, totals=totals,
                           outputs=outputs, seen=seen, path=path, progress=stream.getvalue())


def test_gauges_csv_round_trip(radial_run):
    r = radial_run
    sim = r.sim
    header = r.path.read_text().splitlines()[0]
    assert header == "t,gauge,x,y,h,hu,hv"
    data = read_gauges(r.path)
    assert set(data) == set(POINTS)
    for gid, (x, y) in POINTS.items():
        d = data[gid]
        assert len(d["t"]) == sim.steps + 1
        assert d["t"][0] == 0.0 and d["t"][-1] == sim.t
        assert np.all(np.diff(d["t"]) > 0)
        assert np.all(d["x"] == x) and np.all(d["y"] == y)
        final = sim.sample(x, y)[0]
        for m, name in enumerate(sim.riemann.field_names):
            assert d[name][-1] == final[m]  # exact: floats are written with repr
    # the initial row is the dam: depth 2 inside the column, 1 outside
    assert data[0]["h"][0] == 2.0 and data["edge"]["h"][0] == 1.0
    mem = r.gauges.data()
    for gid in POINTS:
        for key, a in mem[gid].items():
            np.testing.assert_array_equal(a, data[gid][key])


def test_gauges_vtp_for_paraview(radial_run):
    pytest.importorskip("vtk")
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkIOXML import vtkXMLPolyDataReader

    reader = vtkXMLPolyDataReader()
    reader.SetFileName(str(radial_run.path.with_suffix(".vtp")))
    reader.Update()
    poly = reader.GetOutput()
    data = read_gauges(radial_run.path)
    assert poly.GetNumberOfPoints() == len(POINTS)
    labels = poly.GetPointData().GetAbstractArray("label")
    pts = vtk_to_numpy(poly.GetPoints().GetData())
    for k, gid in enumerate(POINTS):
        assert labels.GetValue(k) == str(gid)
        assert tuple(pts[k, :2]) == POINTS[gid]
        for name in ("h", "hu", "hv"):
            last = vtk_to_numpy(poly.GetPointData().GetArray(name))[k]
            peak = vtk_to_numpy(poly.GetPointData().GetArray(f"max_{name}"))[k]
            assert last == data[gid][name][-1] and peak == data[gid][name].max()


def test_gauge_field_subset(radial_run):
    d = radial_run.depth.data()[0]
    assert set(d) == {"t", "x", "y", "h"}
    assert d["h"][-1] == radial_run.sim.sample(0.3, 0.3)[0, 0]


def test_totals_history(radial_run):
    r = radial_run
    assert len(r.totals) == r.sim.steps + 1 == len(r.totals.history)
    a = r.totals.arrays()
    assert set(a) == {"t", "h", "hu", "hv"}
    assert a["h"][0] == r.sim.totals_initial["h"]
    assert a["h"][-1] == r.sim.totals()["h"]
    assert r.totals.drift()["h"] < 1e-12


def test_output_times_and_progress_in_a_run(radial_run):
    r = radial_run
    assert [f[0] for f in r.outputs.fired] == [0.0, 0.02, 0.05]
    assert r.seen[0] == (0.0, 0)
    # the steps land on the output times (Clawpack's behaviour): state at that time
    assert all(f[1] == pytest.approx(f[0], abs=1e-12) for f in r.outputs.fired)
    assert [t for t, _ in r.seen] == pytest.approx([0.0, 0.02, 0.05], abs=1e-12)
    assert r.seen[-1][0] == pytest.approx(0.05) and not r.outputs.pending
    assert r.progress.strip().splitlines()[-1].startswith("100%")


def _fake(t=0.0, t_final=1.0):
    return SimpleNamespace(t=t, t_final=t_final, steps=0, geom=SimpleNamespace(npatch=4))


def _advance(sim, callbacks, times):
    for cb in callbacks:
        cb.on_start(sim)
    for t in times:
        sim.t, sim.steps = t, sim.steps + 1
        for cb in callbacks:
            cb.on_step(sim)
    for cb in callbacks:
        if hasattr(cb, "on_end"):
            cb.on_end(sim)


def test_output_times_fire_on_first_step_at_or_after():
    sim = _fake()
    calls = []
    cb = OutputTimes([0.25, 0.5, 0.55, 1.0], lambda s: calls.append(s.t))
    _advance(sim, [cb], [0.2, 0.3, 0.6, 0.9, 1.0])
    assert calls == [0.3, 0.6, 1.0]  # 0.5 and 0.55 passed by one step: one call
    assert [(f[0], f[1]) for f in cb.fired] == [(0.25, 0.3), (0.5, 0.6), (0.55, 0.6), (1.0, 1.0)]


def test_output_interval():
    sim = _fake(t_final=1.0)
    calls = []
    cb = OutputTimes(0.4, lambda s: calls.append(s.t))
    _advance(sim, [cb], [0.1 * k for k in range(1, 11)])
    assert cb.times == pytest.approx([0.0, 0.4, 0.8, 1.0])
    assert calls == pytest.approx([0.0, 0.4, 0.8, 1.0])
    with pytest.raises(ValueError):
        OutputTimes(0.0, print)


def test_progress_lines_every_tenth():
    stream = io.StringIO()
    sim = _fake()
    _advance(sim, [Progress(stream)], [0.01 * k for k in range(1, 101)])
    lines = stream.getvalue().splitlines()
    assert [ln.split("%")[0].strip() for ln in lines] == [str(10 * k) for k in range(1, 11)]


def test_progress_rate_leaves_compilation_out(monkeypatch):
    # 10 s of wall time, 8 of them compiling: the rate is over the other 2 s
    clock = iter([100.0, 110.0])
    monkeypatch.setattr("forestpy.callbacks.time.perf_counter", lambda: next(clock))
    stream = io.StringIO()
    sim = _fake()
    sim.cell_updates, sim.timers = 0, SimpleNamespace(compile_s=1.0)
    progress = Progress(stream, every=1.0)
    progress.on_start(sim)
    sim.t, sim.steps, sim.cell_updates, sim.timers.compile_s = 1.0, 5, 2000, 9.0
    progress.on_step(sim)
    assert "1e+03 cells/s" in stream.getvalue() and "wall 10.0 s" in stream.getvalue()


class _Solver:
    """A solver that is not a Simulation (as HWFV1, VBM): it reports its own steps."""

    def __init__(self, t_final=None):
        self.t, self.steps, self.cell_updates = 0.0, 0, 0
        if t_final is not None:
            self.t_final = t_final

    def step(self, dt, t_end=None):
        self.t += dt
        self.steps += 1
        self.cell_updates += 100
        report_step(self, t_end)


def test_report_step_shows_progress_only_in_a_scope():
    _Solver(1.0).step(0.5)  # no scope open: nothing happens
    stream = io.StringIO()
    with progress_scope(Progress(stream)):
        solver = _Solver(t_final=1.0)
        for _ in range(10):
            solver.step(0.1)
        other = _Solver()  # a second solver: its own display, the end given per step
        for _ in range(4):
            other.step(0.5, t_end=2.0)
    lines = stream.getvalue().splitlines()
    first = [ln for ln in lines if "/1 " in ln]
    second = [ln for ln in lines if "/2 " in ln]
    assert [ln.split("%")[0].strip() for ln in first] == [str(10 * k) for k in range(1, 11)]
    assert first[-1].startswith("100%  t=1/1  step 10") and "cells/s" in first[-1]
    assert [ln.split("%")[0].strip() for ln in second] == ["25", "50", "75", "100"]
    assert len(lines) == len(first) + len(second)
    _Solver(1.0).step(0.5)  # the scope closed: nothing happens
    assert stream.getvalue().splitlines() == lines


def test_progress_bar_on_tty():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    sim = _fake()
    _advance(sim, [Progress(stream)], [0.5, 1.0])
    text = stream.getvalue()
    assert text.startswith("\r[") and "100.0%" in text and text.endswith("\n")


def test_gauges_reject_bad_input(tmp_path):
    with pytest.raises(ValueError):
        Gauges([])
    with pytest.raises(ValueError):
        Gauges({"a,b": (0, 0)})
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a gauge file"):
        read_gauges(bad)


def test_timer_breakdown_by_phase_and_ghost_fill_kind(radial_dam, tmp_path):
    from forestpy.io.vtk import VTKOutput

    sim = radial_dam.setup(mx=8, min_level=1, max_level=3, t_final=0.05)
    sim.callbacks += [VTKOutput(tmp_path, interval=0.025), Gauges([(0.0, 0.0)])]
    sim.run()
    sec = sim.timers.seconds
    for kind in ("copy", "average", "interpolate", "physical_bc"):
        assert sec[f"ghost_fill.{kind}"] > 0.0, kind
    parts = sum(v for k, v in sec.items() if k.startswith("ghost_fill."))
    assert parts <= sec["ghost_fill"]
    assert sec["output"] > 0.0 and sec["callbacks"] == 0.0  # writers count as output
    timers = sim.summary()["timers"]
    top = sum(v for k, v in timers.items() if "." not in k and k not in ("other", "total"))
    assert top + timers["other"] == pytest.approx(timers["total"], abs=1e-5)
    report = sim.timers.report(sim.wall_s)
    assert "  interpolate" in report and "other" in report and "output" in report


def test_gauges_record_derived_fields_and_write_netcdf(radial_dam, tmp_path):
    xr = pytest.importorskip("xarray")
    sim = radial_dam.setup(mx=8, min_level=2, max_level=3, t_final=0.1)
    points = {"centre": (0.05, 0.02), "ring": (0.55, 0.1), 7: (-0.3, 0.4)}
    fields = ["h", "speed", "velocity_x", "surface", "hu"]
    gauges = Gauges(points, fields=fields, path=tmp_path / "g.nc", units=SHALLOW_WATER_SI,
                    crs="local metres from the domain centre")
    sim.callbacks.append(gauges)
    sim.run()
    q = sim.sample([0.05, 0.55, -0.3], [0.02, 0.1, 0.4])
    last = gauges.data()
    for g, gid in enumerate(points):
        h, hu, hv = q[g]
        assert last[gid]["h"][-1] == h and last[gid]["hu"][-1] == hu
        assert last[gid]["velocity_x"][-1] == pytest.approx(hu / h, rel=1e-14)
        assert last[gid]["speed"][-1] == pytest.approx(np.hypot(hu, hv) / h, rel=1e-14)
        assert last[gid]["surface"][-1] == pytest.approx(h, rel=1e-14)  # flat bottom
    ds = xr.open_dataset(tmp_path / "g.nc")
    assert list(ds["gauge"].values) == ["centre", "ring", "7"]
    assert ds["speed"].shape == (len(gauges.times), 3)
    np.testing.assert_array_equal(ds["time"].values, gauges.times)
    np.testing.assert_array_equal(ds["hu"].values[:, 1], last["ring"]["hu"])
    # CF metadata: the time-series layout, units, names, the coordinate system
    assert ds.attrs["Conventions"] == "CF-1.8" and ds.attrs["featureType"] == "timeSeries"
    assert ds["gauge"].attrs["cf_role"] == "timeseries_id"
    assert ds["time"].attrs["units"] == "s" and ds["time"].attrs["standard_name"] == "time"
    assert ds["speed"].attrs["units"] == "m s-1" and ds["hu"].attrs["units"] == "m2 s-1"
    assert ds["surface"].attrs["long_name"] == "water surface elevation"
    assert ds["x"].attrs["units"] == "m"
    assert ds.attrs["coordinate_system"] == "local metres from the domain centre"
    ds.close()
    # read_gauges reads the NetCDF back as it reads the CSV: the same series
    gauges.write(tmp_path / "g.csv")
    from_nc, from_csv = read_gauges(tmp_path / "g.nc"), read_gauges(tmp_path / "g.csv")
    assert list(from_nc) == list(from_csv) == ["centre", "ring", 7]
    for gid in from_csv:
        assert from_nc[gid].keys() == from_csv[gid].keys()
        for key in from_csv[gid]:
            np.testing.assert_array_equal(from_nc[gid][key], from_csv[gid][key])
    with pytest.raises(ValueError, match="unknown gauge field 'depthh'.*speed"):
        bad = Gauges([(0.0, 0.0)], fields=["depthh"])
        bad.on_start(sim)


def test_gauges_vtp_says_units_and_coordinates(tmp_path, radial_dam):
    pytest.importorskip("vtk")
    from vtkmodules.vtkIOXML import vtkXMLPolyDataReader

    sim = radial_dam.setup(mx=8, min_level=2, max_level=2, t_final=0.01)
    sim.callbacks.append(Gauges([(0.0, 0.0)], path=tmp_path / "g.csv", units={"h": "m"},
                                crs="local"))
    sim.run()
    reader = vtkXMLPolyDataReader()
    reader.SetFileName(str(tmp_path / "g.vtp"))
    reader.Update()
    fd = reader.GetOutput().GetFieldData()
    assert fd.GetAbstractArray("units").GetValue(0) == "h=m"
    assert fd.GetAbstractArray("crs").GetValue(0) == "local"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_output_files_follow_the_umask(tmp_path, umask, radial_dam):
    # atomic writes go through mkstemp (0600): the file must get the mode a plain open()
    # would give it, 0666 less the umask
    from forestpy.io.summary import write_json_atomic

    old = os.umask(umask)
    try:
        write_json_atomic(tmp_path / "s.json", {"a": 1})
        sim = radial_dam.setup(mx=8, min_level=2, max_level=2, t_final=0.01)
        sim.callbacks.append(Gauges([(0.0, 0.0)], path=tmp_path / "g.csv"))
        sim.run()
    finally:
        os.umask(old)
    names = ["s.json", "g.csv"] + (["g.vtp"] if (tmp_path / "g.vtp").exists() else [])
    for name in names:
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name
