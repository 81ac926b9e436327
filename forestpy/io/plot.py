"""Pictures without ParaView: render output frames to PNG, and runs to GIF/MP4.

Frames are those of :mod:`forestpy.io.vtk` (``.vthb`` AMR or ``.vtm`` flat); the
picture shows one cell field with a colour bar, the outlines of the leaf patches and,
optionally, contour lines.  Rendering is offscreen through pyvista
(``pip install 'forestpy[plot]'``), so it works on a machine without a display (VTK
picks EGL or OSMesa).

    from forestpy.io.plot import render_frame, render_movie
    render_frame("out/radial/frame_0010.vthb", "depth", "depth.png", contour=[1.2])
    render_movie("out/radial/frame.pvd", "depth", "depth.gif")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["leaf_blocks", "render_frame", "render_movie", "frame_files"]

# vtkDataSetAttributes::REFINEDCELL (a coarse cell covered by a finer block) and
# HIDDENCELL: both are not drawn
_COVERED = 8 | 32


def _pyvista():
    import os

    if not os.environ.get("DISPLAY"):  # headless: go straight to EGL, no X11 warning
        os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    try:
        import pyvista
    except ImportError as exc:
        raise RuntimeError(
            "plotting needs pyvista: pip install 'forestpy[plot]' (pyvista, imageio)"
        ) from exc
    pyvista.OFF_SCREEN = True
    return pyvista


def _read(path: Path):
    from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader, vtkXMLUniformGridAMRReader

    if not path.is_file():
        raise FileNotFoundError(f"no frame file {path}")
    if path.suffix == ".vthb":
        reader = vtkXMLUniformGridAMRReader()
        reader.SetFileName(str(path))
        reader.SetMaximumLevelsToReadByDefault(0)  # all levels
    elif path.suffix == ".vtm":
        reader = vtkXMLMultiBlockDataReader()
        reader.SetFileName(str(path))
    else:
        raise ValueError(f"{path}: not a forestpy frame (.vthb or .vtm)")
    reader.Update()
    data = reader.GetOutputDataObject(0)
    if data is None or data.GetNumberOfCells() == 0:
        raise ValueError(f"{path}: the frame holds no cells (corrupt or empty file)")
    return data


def leaf_blocks(path) -> list:
    """The visible part of every block of a frame as pyvista meshes (covered cells of an
    AMR frame removed), in file order."""
    pv = _pyvista()
    from vtkmodules.vtkCommonDataModel import vtkImageData

    data = _read(Path(path))
    blocks = []
    it = data.NewIterator()
    it.InitTraversal()
    while not it.IsDoneWithTraversal():
        obj = it.GetCurrentDataObject()
        it.GoToNextItem()
        if obj is None or obj.GetNumberOfCells() == 0:
            continue
        image = vtkImageData()  # pyvista wraps image data, not AMR's vtkUniformGrid
        image.ShallowCopy(obj)
        block = pv.wrap(image)
        ghost = block.cell_data.get("vtkGhostType")
        if ghost is not None:
            keep = np.flatnonzero((np.asarray(ghost) & _COVERED) == 0)
            if len(keep) == 0:
                continue
            if len(keep) < block.n_cells:
                block = block.extract_cells(keep)
        blocks.append(block)
    return blocks


def _scene(pv, blocks, field, *, clim, contour, outlines, cmap, window_size, title):
    if not blocks:
        raise ValueError("nothing to draw: every block is covered")
    if field not in blocks[0].cell_data:
        names = [n for n in blocks[0].cell_data if n != "vtkGhostType"]
        raise ValueError(f"no cell field {field!r} in the frame; fields: {names}")
    mesh = pv.MultiBlock(blocks).combine()
    plotter = pv.Plotter(off_screen=True, window_size=list(window_size))
    plotter.add_mesh(mesh, scalars=field, preference="cell", cmap=cmap, clim=clim,
                     show_scalar_bar=True, scalar_bar_args={"title": field})
    if outlines:
        for block in blocks:
            plotter.add_mesh(block.outline(), color="black", line_width=1)
    if contour is not None:
        levels = [float(v) for v in np.atleast_1d(contour)]
        lines = mesh.clean().cell_data_to_point_data().contour(isosurfaces=levels, scalars=field)
        if lines.n_points:
            plotter.add_mesh(lines, color="white", line_width=2)
    if title:
        plotter.add_text(title, font_size=10)
    plotter.view_xy()
    return plotter


def render_frame(frame, field: str, png, *, contour: Sequence[float] | float | None = None,
                 outlines: bool = True, cmap: str = "viridis", clim=None,
                 window_size=(900, 800), title: str | None = None) -> Path:
    """Render ``field`` of one frame to ``png``; returns the path written."""
    pv = _pyvista()
    blocks = leaf_blocks(frame)
    plotter = _scene(pv, blocks, field, clim=clim, contour=contour, outlines=outlines,
                     cmap=cmap, window_size=window_size, title=title)
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    plotter.screenshot(str(png))
    plotter.close()
    return png


def frame_files(target) -> list[tuple[float | None, Path]]:
    """``(time, frame file)`` pairs of an output folder (its ``.pvd``), a ``.pvd`` file
    or a single frame file."""
    from forestpy.io.vtk import read_pvd

    target = Path(target)
    if target.is_dir():
        pvds = sorted(target.glob("*.pvd"))
        if not pvds:
            raise FileNotFoundError(f"{target}: no .pvd collection (write frames with VTKOutput)")
        target = pvds[0]
    if target.suffix == ".pvd":
        if not target.is_file():
            raise FileNotFoundError(f"no collection file {target}")
        return [(t, target.parent / f) for t, f in read_pvd(target)]
    return [(None, target)]


def render_movie(target, field: str, out, *, fps: float = 5.0, contour=None,
                 outlines: bool = True, cmap: str = "viridis",
                 window_size=(900, 800)) -> Path:
    """Render every frame of ``target`` (folder or ``.pvd``) into an animated GIF, or an
    MP4 when ``out`` ends in ``.mp4`` (needs ``imageio-ffmpeg``).  The colour range is
    fixed over the whole run."""
    import imageio.v2 as imageio

    pv = _pyvista()
    frames = frame_files(target)
    all_blocks = [leaf_blocks(f) for _, f in frames]
    values = [np.asarray(b.cell_data[field]) for blocks in all_blocks for b in blocks
              if field in b.cell_data]
    clim = (float(min(v.min() for v in values)), float(max(v.max() for v in values))) \
        if values else None
    images = []
    for (t, _), blocks in zip(frames, all_blocks):
        plotter = _scene(pv, blocks, field, clim=clim, contour=contour, outlines=outlines,
                         cmap=cmap, window_size=window_size,
                         title=None if t is None else f"t = {t:.4g}")
        images.append(plotter.screenshot(return_img=True))
        plotter.close()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".mp4":
        imageio.mimsave(str(out), images, fps=fps)
    elif out.suffix == ".gif":
        imageio.mimsave(str(out), images, duration=1.0 / fps, loop=0)
    else:
        raise ValueError(f"{out}: movie file must end in .gif or .mp4")
    return out
