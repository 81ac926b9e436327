"""ParaView output of the two-layer solver: one ``.vtu`` (VTK unstructured grid of
triangles, cell data) per frame and a ``.pvd`` collection with the frame times.

A distributed run (:class:`~forestpy.solvers.tworoe.distributed.DistributedSolver` on
more than one rank) writes, per frame, one ``.vtu`` piece per rank with the rank's own
cells (no rank gathers the global state) and, on rank 0, a ``.pvtu`` naming the pieces;
the ``.pvd`` lists the ``.pvtu`` files.  Each piece has two more cell arrays:
``global_cell`` (the cell's index in the global mesh) and ``rank``.

Fields (:meth:`~forestpy.solvers.tworoe.solver.TwoLayerSolver.fields`): ``h1``, ``h2``
(depths), ``u1``, ``u2`` (velocities, 3-vectors with z = 0 for ParaView's glyphs),
``interface`` (``h2 - H``), ``surface`` (``h1 + h2 - H``) and ``bottom`` (``-H``).
Needs ``vtk`` (the ``io`` extra).
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

__all__ = ["FrameWriter", "render_field", "write_piece", "write_pvtu", "write_vtu"]


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
        a = np.asarray(v)
        if a.dtype.kind not in "iu":
            a = a.astype(np.float64)
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


class _Piece:
    """The triangles ``cells`` of a mesh as a mesh of their own (the nodes they use,
    renumbered in increasing order): what :func:`write_vtu` needs."""

    def __init__(self, mesh, cells):
        tris = np.asarray(mesh.tris)[cells]
        used, local = np.unique(tris, return_inverse=True)
        self.nodes = np.asarray(mesh.nodes)[used]
        self.tris = local.reshape(tris.shape)
        self.num_cells = len(tris)


def write_piece(path, mesh, cells, fields: dict, time: float | None = None,
                rank: int = 0) -> Path:
    """Write the triangles ``cells`` (global indices) of ``mesh`` with ``fields`` (one
    value per entry of ``cells``) as one piece of a partitioned frame, with the cell
    arrays ``global_cell`` and ``rank`` added."""
    cells = np.asarray(cells, dtype=np.int64)
    fields = {**fields, "global_cell": cells,
              "rank": np.full(len(cells), rank, dtype=np.int32)}
    return write_vtu(path, _Piece(mesh, cells), fields, time)


_VTK_TYPES = {"f8": "Float64", "f4": "Float32", "i8": "Int64", "i4": "Int32"}


def write_pvtu(path, pieces, fields: dict) -> Path:
    """Write the ``.pvtu`` of a partitioned frame: ``pieces`` are the file names of its
    ``.vtu`` pieces (relative to the ``.pvtu``), ``fields`` the cell arrays of one
    piece as :func:`write_piece` was given them (their names, types and components)."""
    rows = []
    for name, v in fields.items():
        a = np.asarray(v)
        a = a if a.dtype.kind in "iu" else a.astype(np.float64)
        ncomp = 1 if a.ndim == 1 else (3 if a.shape[1] == 2 else a.shape[1])
        comps = f' NumberOfComponents="{ncomp}"' if ncomp > 1 else ""
        rows.append(f'      <PDataArray type="{_VTK_TYPES[a.dtype.str[1:]]}" '
                    f"Name={quoteattr(name)}{comps}/>")
    rows.append('      <PDataArray type="Int64" Name="global_cell"/>')
    rows.append('      <PDataArray type="Int32" Name="rank"/>')
    src = "\n".join(f"    <Piece Source={quoteattr(str(p))}/>" for p in pieces)
    path = Path(path)
    path.write_text(
        '<?xml version="1.0"?>\n<VTKFile type="PUnstructuredGrid" version="1.0" '
        'byte_order="LittleEndian" header_type="UInt64">\n'
        '  <PUnstructuredGrid GhostLevel="0">\n    <PCellData>\n' + "\n".join(rows)
        + '\n    </PCellData>\n    <PPoints>\n      <PDataArray type="Float64" '
        'NumberOfComponents="3"/>\n    </PPoints>\n' + src
        + "\n  </PUnstructuredGrid>\n</VTKFile>\n")
    return path


class FrameWriter:
    """Frames ``stem_0000.vtu, ...`` in ``folder`` and ``stem.pvd`` listing them (the
    collection is rewritten after each frame, so it is valid while a run goes on).

    With a distributed solver on more than one rank, :meth:`write` is collective: each
    rank writes its piece ``stem_0000_RRRR.vtu`` (its own cells), rank 0 the
    ``stem_0000.pvtu`` and the ``.pvd``; every rank returns once all pieces are
    written."""

    def __init__(self, folder, stem: str = "frame"):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stem = stem
        self.frames: list[tuple[float, str]] = []

    def write(self, sim) -> Path:
        comm = getattr(sim, "comm", None)
        size = 1 if comm is None else comm.Get_size()
        stem = f"{self.stem}_{len(self.frames):04d}"
        if size == 1:
            name = f"{stem}.vtu"
            fields = sim.fields()
            if hasattr(sim, "layout"):  # a distributed solver on one rank: global order
                order = np.argsort(sim.layout.cells[:sim.layout.n_owned])
                fields = {k: v[order] for k, v in fields.items()}
            write_vtu(self.folder / name, sim.mesh, fields, sim.t)
            rank = 0
        else:
            rank = comm.Get_rank()
            name = f"{stem}.pvtu"
            fields = sim.fields()
            lay = sim.layout
            write_piece(self.folder / f"{stem}_{rank:04d}.vtu", sim.mesh,
                        lay.cells[:lay.n_owned], fields, sim.t, rank)
            if rank == 0:
                write_pvtu(self.folder / name,
                           [f"{stem}_{q:04d}.vtu" for q in range(size)], fields)
        self.frames.append((float(sim.t), name))
        if rank == 0:
            rows = "\n".join(f'    <DataSet timestep="{t!r}" part="0" file={quoteattr(f)}/>'
                             for t, f in self.frames)
            (self.folder / f"{self.stem}.pvd").write_text(
                '<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">\n'
                f"  <Collection>\n{rows}\n  </Collection>\n</VTKFile>\n")
        if size > 1:
            comm.Barrier()
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
