r"""Output of a 3D lattice-Boltzmann run for ParaView: slices and isosurfaces of the
velocity magnitude and the vorticity, a time series (``.pvd``), a PNG of the wake and
the force history as CSV.

* :func:`flow_fields` -- velocity magnitude ``|u|``, vorticity ``curl u`` (central
  differences, one-sided at the ends; 0 in and next to walls is not forced: the walls
  hold ``u = 0``) and its magnitude, density, on the host.
* :class:`FrameWriter` -- one *frame* per call: ``NAME_NNNN.vtm``, a multiblock of the
  slices (``.vti`` image data one cell thick, cell data, named ``slice x=..`` etc.) and,
  if asked, an isosurface of the vorticity magnitude (``.vtp``, VTK's contour filter on
  the host, values of ``|u|`` on it); ``NAME.pvd`` lists the frames with their times
  (lattice steps or convective times), so ParaView opens the run as a time series.
* :func:`wake_png` -- the velocity magnitude on the mid-plane through the sphere's
  centre, rendered offscreen with pyvista.
* :func:`write_force_csv` -- step, convective time, ``C_D``, ``C_y``, ``C_z``.

Files are written with the XML writers of the ``vtk`` package (``pip install
'forestpy[io]'``); the ``.vtm`` is written last, after its blocks.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["flow_fields", "FrameWriter", "wake_png", "write_force_csv"]


def flow_fields(sim) -> dict:
    """``{"speed", "vorticity" (3, ...), "vorticity_magnitude", "density"}`` of
    :class:`~.solver.LBM` ``sim``, float64 arrays ``(nx, ny, nz)`` on the host (lattice
    units); wall cells hold ``u = 0`` and ``rho = 1``."""
    f = sim.distributions()
    rho = f.sum(axis=0)
    from .lattice import C

    u = np.tensordot(C.T.astype(np.float64), f, axes=(1, 0))
    u += 0.5 * sim.force.reshape(3, 1, 1, 1)
    u /= rho
    u[:, sim.walls] = 0.0
    rho[sim.walls] = 1.0
    g = [np.gradient(u[a]) for a in range(3)]  # g[a][b] = d u_a / d x_b
    w = np.stack([g[2][1] - g[1][2], g[0][2] - g[2][0], g[1][0] - g[0][1]])
    return {"speed": np.sqrt((u * u).sum(axis=0)), "velocity": u, "vorticity": w,
            "vorticity_magnitude": np.sqrt((w * w).sum(axis=0)), "density": rho}


def _vtk():
    """The VTK classes used here (``vtk`` is optional: imported on first use)."""
    try:
        from vtkmodules.util.numpy_support import numpy_to_vtk
        from vtkmodules.vtkCommonDataModel import vtkImageData
        from vtkmodules.vtkFiltersCore import vtkContourFilter
        from vtkmodules.vtkIOXML import vtkXMLImageDataWriter, vtkXMLPolyDataWriter
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("LBM output needs the 'vtk' package: pip install 'forestpy[io]'"
                          ) from exc
    return dict(numpy_to_vtk=numpy_to_vtk, vtkImageData=vtkImageData,
                vtkContourFilter=vtkContourFilter, vtkXMLImageDataWriter=vtkXMLImageDataWriter,
                vtkXMLPolyDataWriter=vtkXMLPolyDataWriter)


def _image(vtk, arrays: dict, origin, shape):
    """vtkImageData with ``shape`` cells (point dimensions shape + 1), cell arrays."""
    img = vtk["vtkImageData"]()
    img.SetDimensions(*(int(s) + 1 for s in shape))
    img.SetOrigin(*map(float, origin))
    img.SetSpacing(1.0, 1.0, 1.0)
    numpy_to_vtk = vtk["numpy_to_vtk"]
    for name, a in arrays.items():
        a = np.asarray(a, dtype=np.float32)
        if a.ndim == 4:  # vector (3, nx, ny, nz) -> (n, 3), x fastest
            data = np.stack([a[i].ravel(order="F") for i in range(3)], axis=1)
        else:
            data = a.ravel(order="F")
        arr = numpy_to_vtk(np.ascontiguousarray(data), deep=True)
        arr.SetName(name)
        img.GetCellData().AddArray(arr)
    return img


class FrameWriter:
    """Frames of slices (and isosurfaces) into ``out_dir``: ``NAME_NNNN.vtm`` +
    ``NAME_NNNN/`` blocks, indexed by ``NAME.pvd``.

    ``slices``: ``(axis, index)`` pairs (axis 0, 1, 2 = x, y, z; the plane of cells
    ``index`` along it); ``iso``: vorticity-magnitude levels of the isosurfaces (none:
    no isosurface).  Each slice carries ``speed``, ``vorticity_magnitude``,
    ``vorticity`` (vector), ``velocity`` (vector) and ``density``.
    """

    FIELDS = ("speed", "vorticity_magnitude", "density", "velocity", "vorticity")

    def __init__(self, out_dir, slices, iso=(), name: str = "wake"):
        from forestpy.io.vtk import PVDCollection

        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.slices = [(int(a), int(i)) for a, i in slices]
        for a, _ in self.slices:
            if a not in (0, 1, 2):
                raise ValueError(f"slice axis must be 0, 1 or 2, got {a}")
        self.iso = tuple(float(v) for v in iso)
        self.name = name
        self.pvd = PVDCollection(self.out_dir / f"{name}.pvd")
        self.written: list[Path] = []

    def write(self, sim, time: float, fields: dict | None = None) -> Path:
        """Write a frame of ``sim`` at ``time`` (the value the ``.pvd`` lists); returns
        the ``.vtm`` path."""
        vtk = _vtk()
        fields = flow_fields(sim) if fields is None else fields
        stem = f"{self.name}_{len(self.pvd):04d}"
        folder = self.out_dir / stem
        folder.mkdir(exist_ok=True)
        blocks = []
        for axis, index in self.slices:
            n = sim.shape[axis]
            if not 0 <= index < n:
                raise ValueError(f"slice index {index} outside 0..{n - 1} along axis {axis}")
            sel = [slice(None)] * 3
            sel[axis] = slice(index, index + 1)
            arrays = {k: (fields[k][(slice(None), *sel)] if fields[k].ndim == 4
                          else fields[k][tuple(sel)]) for k in self.FIELDS}
            shape = list(sim.shape)
            shape[axis] = 1
            origin = [0.0, 0.0, 0.0]
            origin[axis] = float(index)
            img = _image(vtk, arrays, origin, shape)
            label = f"slice {'xyz'[axis]}={index}"
            fname = f"{stem}/slice_{'xyz'[axis]}{index}.vti"
            w = vtk["vtkXMLImageDataWriter"]()
            w.SetFileName(str(self.out_dir / fname))
            w.SetInputData(img)
            w.Write()
            blocks.append((label, fname))
        for level in self.iso:
            poly = self.isosurface(fields, level)
            fname = f"{stem}/iso_vorticity_{level:g}.vtp"
            w = vtk["vtkXMLPolyDataWriter"]()
            w.SetFileName(str(self.out_dir / fname))
            w.SetInputData(poly)
            w.Write()
            blocks.append((f"|vorticity| = {level:g}", fname))
        vtm = self.out_dir / f"{stem}.vtm"
        lines = ['<?xml version="1.0"?>',
                 '<VTKFile type="vtkMultiBlockDataSet" version="1.0" byte_order="LittleEndian">',
                 "  <vtkMultiBlockDataSet>"]
        for k, (label, fname) in enumerate(blocks):
            lines.append(f'    <DataSet index="{k}" name="{label}" file="{fname}"/>')
        lines += ["  </vtkMultiBlockDataSet>", "</VTKFile>", ""]
        tmp = vtm.with_suffix(".vtm.tmp")
        tmp.write_text("\n".join(lines))
        os.replace(tmp, vtm)
        self.pvd.add(float(time), vtm.name)
        self.written.append(vtm)
        return vtm

    @staticmethod
    def isosurface(fields: dict, level: float):
        """vtkPolyData: the surface ``|vorticity| = level`` (point data ``speed``)."""
        vtk = _vtk()
        shape = fields["speed"].shape
        img = vtk["vtkImageData"]()
        img.SetDimensions(*shape)  # values at points: cell centres (0..n-1)
        numpy_to_vtk = vtk["numpy_to_vtk"]
        for name in ("vorticity_magnitude", "speed"):
            arr = numpy_to_vtk(np.ascontiguousarray(
                fields[name].astype(np.float32).ravel(order="F")), deep=True)
            arr.SetName(name)
            img.GetPointData().AddArray(arr)
        img.GetPointData().SetActiveScalars("vorticity_magnitude")
        contour = vtk["vtkContourFilter"]()
        contour.SetInputData(img)
        contour.SetValue(0, float(level))
        contour.Update()
        return contour.GetOutput()


def wake_png(path, fields: dict, axis: int, index: int, title: str = "",
             field: str = "speed") -> Path:
    """PNG of ``field`` on the plane ``index`` across ``axis`` (offscreen pyvista)."""
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    import pyvista as pv

    pv.OFF_SCREEN = True
    sel = [slice(None)] * 3
    sel[axis] = index
    plane = np.asarray(fields[field][tuple(sel)], dtype=np.float64)  # 2D
    nx, ny = plane.shape
    grid = pv.ImageData(dimensions=(nx + 1, ny + 1, 1))
    grid.cell_data[field] = plane.ravel(order="F")
    p = pv.Plotter(off_screen=True, window_size=[1400, int(1400 * ny / nx) + 120])
    p.add_mesh(grid, scalars=field, cmap="viridis",
               scalar_bar_args={"title": field.replace("_", " ")})
    if title:
        p.add_text(title, font_size=10)
    p.view_xy()
    p.camera.zoom(1.3)
    p.screenshot(str(path))
    p.close()
    return Path(path)


def write_force_csv(path, coefficients, steps_per_time: float) -> Path:
    """``step, t (convective), CD, Cy, Cz`` per step (``coefficients`` ``(n, 3)``)."""
    c = np.asarray(coefficients, dtype=np.float64)
    step = np.arange(1, len(c) + 1)
    np.savetxt(path, np.column_stack([step, step / steps_per_time, c]), delimiter=",",
               header="step,t_convective,CD,Cy,Cz", comments="",
               fmt=["%d", "%.6f", "%.9g", "%.9g", "%.9g"])
    return Path(path)
