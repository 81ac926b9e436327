"""Offscreen pictures of output frames (pyvista), PNG and animated GIF."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyvista")
imageio = pytest.importorskip("imageio.v2")

_PROBE = (
    "from vtkmodules.vtkRenderingCore import vtkRenderWindow, vtkRenderer\n"
    "import vtkmodules.vtkRenderingOpenGL2\n"
    "w = vtkRenderWindow(); w.SetOffScreenRendering(1); w.AddRenderer(vtkRenderer());"
    " w.Render()\n"
)
# a crash of the OpenGL set-up must not take pytest down: probe in a subprocess
if subprocess.run([sys.executable, "-c", _PROBE], capture_output=True).returncode != 0:
    pytest.skip("no offscreen OpenGL here (make test installs Mesa's EGL)",
                allow_module_level=True)

from testsupport import ROOT  # noqa: E402

from forestpy.io.plot import frame_files, leaf_blocks, render_frame, render_movie  # noqa: E402
from forestpy.io.vtk import VTKOutput  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, radial_dam):
    out = tmp_path_factory.mktemp("frames")
    sim = radial_dam.setup(mx=8, min_level=2, max_level=3, t_final=0.3)
    sim.callbacks.append(VTKOutput(out, interval=0.1))
    sim.run()
    flat = tmp_path_factory.mktemp("flat")
    sim2 = radial_dam.setup(mx=8, min_level=2, max_level=3, t_final=0.05)
    sim2.callbacks.append(VTKOutput(flat, kind="flat", interval=0.1))
    sim2.run()
    return out, flat, sim


def test_leaf_blocks_are_the_forest_leaves(run_dir):
    out, flat, sim = run_dir
    frames = frame_files(out)
    blocks = leaf_blocks(frames[-1][1])
    assert len(blocks) == sim.geom.npatch  # covered ancestors are dropped
    assert sum(b.n_cells for b in blocks) == sim.geom.npatch * sim.mx * sim.my
    depth = np.concatenate([np.asarray(b.cell_data["depth"]) for b in blocks])
    b = sim.mbc
    assert depth.min() == pytest.approx(sim.q[:, 0, b:-b, b:-b].min())
    assert depth.max() == pytest.approx(sim.q[:, 0, b:-b, b:-b].max())
    assert len(leaf_blocks(frame_files(flat)[0][1])) > 0


def test_png_field_outlines_contour(run_dir, tmp_path):
    out, _, _ = run_dir
    frame = frame_files(out)[-1][1]
    plain = imageio.imread(render_frame(frame, "depth", tmp_path / "a.png", outlines=False,
                                        window_size=(320, 240)))
    assert plain.shape[:2] == (240, 320)
    assert plain.reshape(-1, plain.shape[-1]).std(axis=0).max() > 10  # not a blank image
    lines = imageio.imread(render_frame(frame, "depth", tmp_path / "b.png",
                                        window_size=(320, 240)))
    contour = imageio.imread(render_frame(frame, "depth", tmp_path / "c.png", outlines=False,
                                          contour=[1.1], window_size=(320, 240)))
    assert np.abs(lines.astype(int) - plain).sum() > 0  # patch outlines drawn
    assert np.abs(contour.astype(int) - plain).sum() > 0  # contour drawn


def test_movie_has_every_frame(run_dir, tmp_path):
    out, _, _ = run_dir
    gif = render_movie(out, "speed", tmp_path / "m.gif", window_size=(200, 160))
    frames = imageio.mimread(gif)
    assert len(frames) == len(frame_files(out)) >= 4


def test_bad_inputs(run_dir, tmp_path):
    out, _, _ = run_dir
    frame = frame_files(out)[0][1]
    with pytest.raises(ValueError, match="no cell field 'nope'.*depth"):
        render_frame(frame, "nope", tmp_path / "x.png")
    with pytest.raises(FileNotFoundError):
        render_frame(tmp_path / "missing.vthb", "depth", tmp_path / "x.png")
    with pytest.raises(FileNotFoundError, match="no .pvd"):
        frame_files(tmp_path)
    with pytest.raises(ValueError, match=".gif or .mp4"):
        render_movie(out, "depth", tmp_path / "m.avi")
    bad = tmp_path / "bad.vthb"
    bad.write_text("<VTKFile broken")
    with pytest.raises(ValueError, match="no cells"):
        render_frame(bad, "depth", tmp_path / "x.png")


def test_cli_run_writes_frames_at_output_times_and_plot_renders_them(tmp_path, capsys):

    from forestpy.cli import main
    from forestpy.io.vtk import read_pvd

    demo = ROOT / "demos" / "radial_dam.py"
    out = tmp_path / "run"
    small = ["--set", "mx=8", "--set", "min_level=2", "--set", "max_level=3"]
    assert main(["run", str(demo), *small, "--set", "t_final=0.2", "--vtk", "amr",
                 "--output-times", "0.05,0.125", "--out", str(out), "--quiet"]) == 0
    times = [t for t, _ in read_pvd(out / "frame.pvd")]
    assert times == pytest.approx([0.0, 0.05, 0.125, 0.2], abs=1e-12)  # steps land on them
    capsys.readouterr()
    assert main(["plot", str(out), "--frame", "1", "--contour", "1.2"]) == 0
    png = out / "frame_0001_depth.png"
    assert png.is_file() and str(png) in capsys.readouterr().out
    assert imageio.imread(png).ndim == 3
    assert main(["plot", str(out), "--field", "hu", "--movie", "hu.gif"]) == 0
    assert len(imageio.mimread(out / "hu.gif")) == 4
    for bad, match in [(["--field", "nope"], "no cell field 'nope'"),
                       (["--frame", "9"], "the run has 4 frames"),
                       (["--contour", "a,b"], "--contour expects")]:
        assert main(["plot", str(out), *bad]) == 2
        assert match in capsys.readouterr().err


def test_frame_pictures_have_axes_units_time_and_say_when_clipped(run_dir, tmp_path,
                                                                  monkeypatch):
    from testsupport import check_figure, record_figures

    from forestpy.io.plot import clipping_note
    from forestpy.io.vtk import write_frame

    sim = run_dir[2]
    sim.units = {"x": "m", "y": "m", "depth": "m", "h": "m", "t": "s"}
    try:
        frame = write_frame(sim, tmp_path / "f")
    finally:
        del sim.units
    figures = record_figures(monkeypatch)
    render_frame(frame, "depth", tmp_path / "a.png", time=0.25)
    check_figure(figures, clipped=False)
    assert figures[-1]["title"] == "depth, t = 0.25 s" and figures[-1]["xlabel"] == "x (m)"
    assert [r["title"] for r in figures if r["kind"] == "bar"] == ["depth (m)"]
    figures.clear()
    render_frame(frame, "depth", tmp_path / "b.png", time=0.25, clim=(1.0, 1.2))
    check_figure(figures, clipped=True)
    # a frame without units: plain names, no unit made up
    figures.clear()
    render_frame(run_dir[0] / "frame_0000.vtm",
                 "depth", tmp_path / "c.png", time=0.0)
    assert figures[-1]["xlabel"] == "x" and figures[-1]["title"] == "depth, t = 0"
    assert clipping_note([1.0, 2.0], (0.0, 3.0)) is None
    assert "above 1.5 m" in clipping_note([1.0, 2.0], (0.0, 1.5), "m")
    assert "below 1.5" in clipping_note([1.0, 2.0], (1.5, 3.0))


def test_plot_gauges_and_fgmax(radial_dam, tmp_path, monkeypatch, capsys):
    # VisClaw's roles: the gauges' time series and the fgmax map, from forestpy plot
    from forestpy.extensions.geoclaw.fgmax import FGMax
    from testsupport import check_figure, record_figures

    from forestpy.callbacks import SHALLOW_WATER_SI, Gauges
    from forestpy.cli import main

    sim = radial_dam.setup(mx=8, min_level=2, max_level=2, t_final=0.05)
    sim.callbacks += [
        Gauges({"a": (0.0, 0.0), "b": (0.7, 0.1)}, fields=["h", "surface"],
               path=tmp_path / "gauges.csv", units=SHALLOW_WATER_SI),
        FGMax.grid(-2.0, 2.0, -2.0, 2.0, 21, 21, topo_index=None,
                   path=tmp_path / "fgmax", crs="radial dam units"),
    ]
    sim.run()
    figures = record_figures(monkeypatch)
    assert main(["plot", str(tmp_path), "--gauges"]) == 0
    assert (tmp_path / "gauges_series.png").stat().st_size > 5000
    chart = [r for r in figures if r["kind"] == "chart"][-1]
    assert chart["xlabel"] == "t (s)" and chart["ylabel"] == "surface (m)"
    assert chart["title"] == "gauges: surface, t = 0 to 0.05 s"
    assert main(["plot", str(tmp_path), "--gauges", "--field", "h",
                 "--png", str(tmp_path / "h.png")]) == 0
    assert main(["plot", str(tmp_path), "--fgmax"]) == 0
    assert (tmp_path / "fgmax_map.png").stat().st_size > 5000
    check_figure([r for r in figures if r["kind"] != "chart"], time=False)
    assert main(["plot", str(tmp_path), "--gauges", "--field", "nope"]) == 2
    assert main(["plot", str(tmp_path), "--fgmax", "missing.npz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "nope" in err[0] and "missing.npz" in err[1], err


def test_grid_frames_of_other_solvers_render(tmp_path, monkeypatch):
    # the frames of HWFV1 / Boussinesq runs (write_grid_frame) are plotted as any other
    from testsupport import check_figure, record_figures

    from forestpy.io.vtk import PVDCollection, write_grid_frame

    x = np.linspace(0.5, 39.5, 40)
    depth = 1.0 + 0.1 * np.sin(x)[None, :] * np.ones((30, 1))
    frame = write_grid_frame(tmp_path / "frame_0000", {"depth": depth, "speed": 0 * depth},
                             (-20.0, -15.0), (1.0, 1.0), 2.5,
                             units={"depth": "m", "x": "m", "y": "m", "t": "s"})
    PVDCollection(tmp_path / "frame.pvd").add(2.5, frame.name)
    (t, f), = frame_files(tmp_path)
    blocks = leaf_blocks(f)
    assert t == 2.5 and len(blocks) == 1 and blocks[0].n_cells == 1200
    assert blocks[0].bounds[:4] == pytest.approx((-20.0, 20.0, -15.0, 15.0))
    figures = record_figures(monkeypatch)
    render_frame(f, "depth", tmp_path / "d.png", time=t)
    check_figure(figures, clipped=False)
    assert figures[-1]["title"] == "depth, t = 2.5 s"
