"""ParaView output of the two-layer solver: one ``.vtu`` (VTK unstructured grid of
triangles, cell data) per frame and a ``.pvd`` collection with the frame times.

Fields (:meth:`~forestpy.solvers.tworoe.solver.TwoLayerSolver.fields`): ``h1``, ``h2``
(depths), ``u1``, ``u2`` (velocities, 3-vectors with z = 0 for ParaView's glyphs),
``interface`` (``h2 - H``), ``surface`` (``h1 + h2 - H``) and ``bottom`` (``-H``).
Needs ``vtk`` (the ``io`` extra).
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

__all__ = ["FrameWriter", "render_field", "write_vtu"]


def write_vtu(path, mesh, fields: dict, time: float | None = None) -> Path:
    """Write one frame: the mesh's triangles with ``fields`` as cell data."""
    import vtk
    from vtk.util.numpy_support import numpy_to_vtk, numpy_to_vtkIdTypeArray

    path = Path(path)
    pts = vtk.vtkPoints()
    xyz = np.zeros((len(mesh.nodes), 3))
    xyz[:, :2] = mesh.nodes
    pts.SetData(numpy_to_vtk(xyz, deep=True))
    n = mesh.num_cells
    offsets = np.arange(0, 3 * n + 1, 3, dtype=np.int64)
    cells = vtk.vtkCellArray()
    cells.SetData(numpy_to_vtkIdTypeArray(offsets, deep=True),
                  numpy_to_vtkIdTypeArray(mesh.tris.astype(np.int64).ravel(), deep=True))
    grid = vtk.vtkUnstructuredGrid()
    grid.SetPoints(pts)
    grid.SetCells(vtk.VTK_TRIANGLE, cells)
    for name, v in fields.items():
        a = np.asarray(v, dtype=np.float64)
        if a.ndim == 2 and a.shape[1] == 2:
            a = np.column_stack([a, np.zeros(n)])
        arr = numpy_to_vtk(np.ascontiguousarray(a), deep=True)
        arr.SetName(name)
        grid.GetCellData().AddArray(arr)
    if time is not None:
        ta = vtk.vtkDoubleArray()
        ta.SetName("TIME")
        ta.InsertNextValue(float(time))
        grid.GetFieldData().AddArray(ta)
    w = vtk.vtkXMLUnstructuredGridWriter()
    w.SetFileName(str(path))
    w.SetInputData(grid)
    w.SetDataModeToAppended()
    w.SetCompressorTypeToZLib()
    if not w.Write():
        raise OSError(f"{path}: the VTK writer failed")
    return path


class FrameWriter:
    """Frames ``stem_0000.vtu, ...`` in ``folder`` and ``stem.pvd`` listing them (the
    collection is rewritten after each frame, so it is valid while a run goes on)."""

    def __init__(self, folder, stem: str = "frame"):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stem = stem
        self.frames: list[tuple[float, str]] = []

    def write(self, sim) -> Path:
        name = f"{self.stem}_{len(self.frames):04d}.vtu"
        write_vtu(self.folder / name, sim.mesh, sim.fields(), sim.t)
        self.frames.append((float(sim.t), name))
        rows = "\n".join(f'    <DataSet timestep="{t!r}" part="0" file={quoteattr(f)}/>'
                         for t, f in self.frames)
        (self.folder / f"{self.stem}.pvd").write_text(
            '<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">\n'
            f"  <Collection>\n{rows}\n  </Collection>\n</VTKFile>\n")
        return self.folder / name


def render_field(png, mesh, values, name: str, *, title: str | None = None,
                 unit: str | None = "m", window_size=(900, 800), cmap="viridis") -> Path:
    """A picture of a cell field on the triangles (off-screen PyVista, the project's
    decorations: title, axes, colour bar); needs the ``plot`` extra."""
    import os

    from forestpy.io.plot import colour_bar, decorate, label

    if not os.environ.get("DISPLAY"):  # headless: EGL, as forestpy.io.plot does
        os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    import pyvista as pv

    pv.OFF_SCREEN = True
    pts = np.zeros((len(mesh.nodes), 3))
    pts[:, :2] = mesh.nodes
    grid = pv.UnstructuredGrid({pv.CellType.TRIANGLE: np.asarray(mesh.tris)}, pts)
    key = label(name, unit)
    grid.cell_data[key] = np.asarray(values, dtype=np.float64)
    plotter = pv.Plotter(off_screen=True, window_size=list(window_size))
    plotter.set_background("white")
    plotter.add_mesh(grid, scalars=key, preference="cell", cmap=cmap,
                     show_scalar_bar=True, scalar_bar_args=colour_bar(key))
    decorate(plotter, title=title or key, xlabel=label("x", unit), ylabel=label("y", unit),
             bounds=grid.bounds)
    plotter.view_xy()
    png = Path(png)
    plotter.screenshot(str(png))
    plotter.close()
    return png
