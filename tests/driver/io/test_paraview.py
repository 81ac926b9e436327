"""What ParaView shows when a user opens ``frame.pvd``, as the README says.

ParaView's PVD reader (``vtkPVDReader``, part of ParaView, not of the ``vtk`` package)
opens every file of the collection with the XML reader of its extension, with that
reader's default settings, and gives it the ``timestep`` of its entry.  For a ``.vthb``
it sets no "Default Number Of Levels", and up to ParaView 5.12 the AMR reader's
default was one level: every finer level came back empty.  ``read_like_pvd_reader``
does the same with VTK's own readers; ``pvpython``, where installed, checks it in
ParaView itself.
"""

import json
import os
import shutil
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from testsupport import ROOT

pytest.importorskip("vtkmodules")

from vtkmodules.util.numpy_support import vtk_to_numpy  # noqa: E402
from vtkmodules.vtkIOXML import (  # noqa: E402
    vtkXMLImageDataReader,
    vtkXMLMultiBlockDataReader,
    vtkXMLUniformGridAMRReader,
)

from forestpy.cli import main  # noqa: E402

DEMO = ROOT / "demos" / "radial_dam.py"
# the configuration of test_vtk.py's run (one compilation for both modules)
SETS = ["--set", "mx=8", "--set", "min_level=1", "--set", "max_level=3",
        "--set", "t_final=0.1"]
DOMAIN_AREA = 5.0 * 5.0


def _reader_for(path: Path):
    """The reader ParaView 5.11's PVD reader makes for ``path``, with its defaults."""
    if path.suffix == ".vthb":
        reader = vtkXMLUniformGridAMRReader()
        reader.SetMaximumLevelsToReadByDefault(1)  # the default up to ParaView 5.12
    elif path.suffix == ".vtm":
        reader = vtkXMLMultiBlockDataReader()
    elif path.suffix == ".vti":
        reader = vtkXMLImageDataReader()
    else:
        raise AssertionError(f"a .pvd entry ParaView would not open as a frame: {path}")
    reader.SetFileName(str(path))
    reader.Update()
    return reader.GetOutputDataObject(0)


def read_like_pvd_reader(pvd: Path) -> list[tuple[float, object]]:
    """``(timestep, dataset)`` per entry of ``pvd``, read as ParaView's PVD reader does
    (the ``.pvd`` parsed here, not by forestpy)."""
    root = ET.parse(pvd).getroot()
    return [(float(ds.get("timestep")), _reader_for(pvd.parent / ds.get("file")))
            for ds in root.iter("DataSet")]


def _leaves(data):
    """The non-empty image blocks of a composite dataset (cells covered by a finer
    block, flagged in vtkGhostType, left out) as ``(spacing, cells, time)``."""
    out = []
    it = data.NewIterator()
    it.InitTraversal()
    while not it.IsDoneWithTraversal():
        block = it.GetCurrentDataObject()
        it.GoToNextItem()
        if block is None or block.GetNumberOfCells() == 0:
            continue
        cd = block.GetCellData()
        ghost = cd.GetArray("vtkGhostType")
        visible = block.GetNumberOfCells() if ghost is None else \
            int(((vtk_to_numpy(ghost) & (8 | 32)) == 0).sum())
        time = block.GetFieldData().GetArray("TimeValue")
        out.append((round(block.GetSpacing()[0], 12), visible,
                    None if time is None else float(vtk_to_numpy(time)[0])))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The README's command: forestpy run ... --vtk amr|flat --output-interval DT."""
    out = {}
    for kind in ("amr", "flat"):
        folder = tmp_path_factory.mktemp(f"paraview_{kind}")
        assert main(["run", str(DEMO), *SETS, "--vtk", kind, "--output-interval", "0.05",
                     "--out", str(folder), "--quiet"]) == 0
        out[kind] = folder
    return out


@pytest.mark.parametrize("kind", ["amr", "flat"])
def test_frame_pvd_shows_every_level_with_times(runs, kind):
    out = runs[kind]
    summary = json.loads((out / "summary.json").read_text())
    frames = read_like_pvd_reader(out / "frame.pvd")
    times = [t for t, _ in frames]
    assert times[0] == 0.0 and times[-1] == pytest.approx(0.1) and len(times) >= 3
    assert times == sorted(times) and len(set(times)) == len(times)
    for t, data in frames:
        leaves = _leaves(data)
        # the visible cells tile the domain: no level is missing
        area = sum(n * h * h for h, n, _ in leaves)
        assert area == pytest.approx(DOMAIN_AREA, rel=1e-12), f"t={t}: levels missing"
        assert all(tv == t for _, _, tv in leaves)  # every block knows its time
        assert len({h for h, _, _ in leaves}) >= 2  # refined from the start
    # the last frame: every level of the final state, each with its cells
    spacing = {lev: round(5.0 / (8 * 2**int(lev)), 12) for lev in summary["patches_per_level"]}
    cells = {}
    for h, n, _ in _leaves(frames[-1][1]):
        cells[h] = cells.get(h, 0) + n
    assert cells == {spacing[lev]: n * 64 for lev, n in summary["patches_per_level"].items()}


def test_pvd_lists_level_views_named_by_level(runs):
    # the block names ParaView's Multiblock Inspector shows: "level L" > "patch P"
    data = read_like_pvd_reader(runs["amr"] / "frame.pvd")[-1][1]
    names = [data.GetMetaData(k).Get(data.NAME()) for k in range(data.GetNumberOfBlocks())]
    summary = json.loads((runs["amr"] / "summary.json").read_text())
    assert names == [f"level {lev}" for lev in sorted(summary["patches_per_level"], key=int)]


PVPYTHON_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from paraview import servermanager
    from paraview.simple import OpenDataFile
    reader = OpenDataFile(sys.argv[1])
    out = []
    for t in reader.TimestepValues:
        reader.UpdatePipeline(t)
        data = servermanager.Fetch(reader)
        cells = {}
        it = data.NewIterator()
        it.InitTraversal()
        while not it.IsDoneWithTraversal():
            block = it.GetCurrentDataObject()
            it.GoToNextItem()
            if block is not None and block.GetNumberOfCells():
                h = round(block.GetSpacing()[0], 12)
                cells[h] = cells.get(h, 0) + block.GetNumberOfCells()
        out.append([t, cells])
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(shutil.which("pvpython") is None,
                    reason="pvpython (ParaView) is not installed; the VTK readers above "
                    "stand in for its PVD reader")
def test_pvpython_opens_frame_pvd_with_every_level(runs, tmp_path):
    out = runs["amr"]
    script = tmp_path / "levels.py"
    script.write_text(PVPYTHON_SCRIPT)
    proc = subprocess.run(["pvpython", "--force-offscreen-rendering", str(script),
                           str(out / "frame.pvd")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = read_like_pvd_reader(out / "frame.pvd")
    assert [t for t, _ in got] == pytest.approx([t for t, _ in want])
    for t, cells in got:
        area = sum(n * float(h) ** 2 for h, n in cells.items())
        assert area == pytest.approx(DOMAIN_AREA, rel=1e-12), f"t={t}: levels missing"
        assert len(cells) >= 2


def test_vtk_reader_emulation_sees_the_old_problem(runs, tmp_path):
    # the check above would catch a .pvd of .vthb files: with ParaView 5.11's defaults
    # only the coarsest level is read
    out = runs["amr"]
    vthb = sorted(out.glob("frame_*.vthb"))[-1]
    pvd = tmp_path / "old.pvd"
    rel = Path(os.path.relpath(vthb, tmp_path)).as_posix()
    pvd.write_text('<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">'
                   f'<Collection><DataSet timestep="0.1" file="{rel}"/></Collection>'
                   "</VTKFile>\n")
    (_, data), = read_like_pvd_reader(pvd)
    assert data.GetNumberOfLevels() > 1  # the file has several levels ...
    assert len({h for h, _, _ in _leaves(data)}) == 1  # ... the reader gives one
