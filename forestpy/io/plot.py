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

__all__ = ["leaf_blocks", "render_frame", "render_movie", "frame_files", "frame_units",
           "clipping_note", "decorate", "colour_bar", "label", "grid_map", "line_chart",
           "add_line", "save_side_by_side", "render_gauges", "render_fgmax"]

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


def frame_units(blocks) -> dict:
    """``{name: unit}`` a frame states (the ``units`` field data that
    :func:`forestpy.io.vtk.write_frame` writes from ``sim.units``); ``{}`` when none."""
    for block in blocks:
        arr = block.GetFieldData().GetAbstractArray("units")
        if arr is not None and arr.GetNumberOfValues():
            text = arr.GetValue(0)
            return dict(item.split("=", 1) for item in text.split(", ") if "=" in item)
    return {}


def label(name: str, unit: str | None) -> str:
    """``"depth (m)"``, or the name alone without a unit."""
    return f"{name} ({unit})" if unit else name


def clipping_note(values, clim, unit: str | None = None) -> str | None:
    """A sentence saying that the colour range ``clim`` leaves out part of ``values``
    (their range given), or None when it covers them all."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if clim is None or v.size == 0:
        return None
    lo, hi = float(v.min()), float(v.max())
    u = f" {unit}" if unit else ""
    parts = []
    if hi > clim[1]:
        parts.append(f"above {clim[1]:.4g}{u}")
    if lo < clim[0]:
        parts.append(f"below {clim[0]:.4g}{u}")
    if not parts:
        return None
    return (f"colour range clipped: values {' and '.join(parts)} drawn in its end colours "
            f"(data {lo:.4g} to {hi:.4g}{u})")


def decorate(plotter, *, title: str, xlabel: str, ylabel: str, note: str | None = None,
             bounds=None) -> None:
    """What every map this project draws carries: axes with titles and tick labels
    (``bounds``: those of the drawn data, default all), the title and a note (e.g.
    :func:`clipping_note`) in the lower left."""
    plotter.show_bounds(bounds=bounds, xtitle=xlabel, ytitle=ylabel, ztitle="",
                        show_zaxis=False, show_zlabels=False, location="outer",
                        ticks="outside", grid=False, font_size=11, use_2d=True,
                        n_xlabels=5, n_ylabels=5, color="black", fmt="%.4g")
    plotter.add_text(title, position="upper_edge", font_size=11, color="black")
    if note:
        plotter.add_text(note, position="lower_left", font_size=8, color="darkred")


def colour_bar(title: str) -> dict:
    """``scalar_bar_args`` of a vertical colour bar at the right, its title above it
    (clear of the tick labels)."""
    return {"title": title + "\n", "vertical": True, "position_x": 0.86,
            "position_y": 0.12, "width": 0.05, "height": 0.72, "title_font_size": 14,
            "label_font_size": 12, "color": "black", "n_labels": 6, "fmt": "%.3g"}


def _scene(pv, blocks, field, *, clim, contour, outlines, cmap, window_size, title,
           units=None):
    if not blocks:
        raise ValueError("nothing to draw: every block is covered")
    if field not in blocks[0].cell_data:
        names = [n for n in blocks[0].cell_data if n != "vtkGhostType"]
        raise ValueError(f"no cell field {field!r} in the frame; fields: {names}")
    units = frame_units(blocks) if units is None else units
    mesh = pv.MultiBlock(blocks).combine()
    plotter = pv.Plotter(off_screen=True, window_size=list(window_size))
    plotter.set_background("white")
    bar = label(field, units.get(field))
    plotter.add_mesh(mesh, scalars=field, preference="cell", cmap=cmap, clim=clim,
                     show_scalar_bar=True, scalar_bar_args=colour_bar(bar))
    if outlines:
        for block in blocks:
            plotter.add_mesh(block.outline(), color="black", line_width=1)
    if contour is not None:
        levels = [float(v) for v in np.atleast_1d(contour)]
        lines = mesh.clean().cell_data_to_point_data().contour(isosurfaces=levels, scalars=field)
        if lines.n_points:
            plotter.add_mesh(lines, color="white", line_width=2)
    note = clipping_note(mesh.cell_data[field], clim, units.get(field))
    decorate(plotter, title=title or bar, xlabel=label("x", units.get("x")),
             ylabel=label("y", units.get("y")), note=note, bounds=mesh.bounds)
    plotter.view_xy()
    return plotter


def grid_map(plotter, x, y, values, *, name: str, unit: str | None, cmap="viridis",
             clim=None, z: float = 0.0, bar: bool = True, **mesh_kw):
    """Draw ``values[j, i]`` of the uniform grid of cell centres ``x[j, i], y[j, i]``
    (NaN transparent) at height ``z``, with a colour bar named ``name (unit)``; returns
    the mesh."""
    pv = _pyvista()
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    sx = x[0, 1] - x[0, 0] if x.shape[1] > 1 else 1.0
    sy = y[1, 0] - y[0, 0] if y.shape[0] > 1 else 1.0
    grid = pv.ImageData(dimensions=(x.shape[1] + 1, x.shape[0] + 1, 1), spacing=(sx, sy, 1),
                        origin=(x[0, 0] - 0.5 * sx, y[0, 0] - 0.5 * sy, z))
    key = label(name, unit)
    grid.cell_data[key] = np.asarray(values, np.float64).ravel()
    plotter.add_mesh(grid, scalars=key, cmap=cmap, clim=clim, nan_opacity=0.0,
                     show_scalar_bar=bar, scalar_bar_args=colour_bar(key) if bar else None,
                     **mesh_kw)
    return grid


def save_side_by_side(path, plotters) -> Path:
    """Screenshots of ``plotters`` (closed after) side by side in one PNG.  (pyvista's
    subplots lose the axis labels of all but the first panel, and share colour bars
    of the same title.)"""
    import imageio.v2 as imageio

    images = []
    for p in plotters:
        images.append(p.screenshot(return_img=True))
        p.close()
    height = max(im.shape[0] for im in images)
    padded = [np.pad(im, ((0, height - im.shape[0]), (0, 0), (0, 0)), constant_values=255)
              for im in images]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.imwrite(path, np.concatenate(padded, axis=1))
    return path


def line_chart(*, title: str, xlabel: str, ylabel: str):
    """A pyvista ``Chart2D`` with its title and axis titles (the line panels of the
    project's figures); add lines with :func:`add_line`."""
    pv = _pyvista()
    chart = pv.Chart2D(x_label=xlabel, y_label=ylabel)
    chart.title = title
    return chart


def add_line(chart, x, y, *, color, label: str, width: float = 2.0) -> None:
    """Add ``y(x)`` to ``chart`` as one line per run of finite values (NaN: a gap)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(np.int8), [0]])))
    for k, (a, b) in enumerate(zip(edges[::2], edges[1::2])):
        if b - a >= 2:
            chart.line(x[a:b], y[a:b], color=color, width=width, label=label if k == 0 else "")


def time_title(field: str, t: float | None, units: dict | None = None) -> str | None:
    """``"depth, t = 0.3 s"`` (None without a time)."""
    if t is None:
        return None
    u = (units or {}).get("t")
    return f"{field}, t = {t:.6g}" + (f" {u}" if u else "")


def render_frame(frame, field: str, png, *, contour: Sequence[float] | float | None = None,
                 outlines: bool = True, cmap: str = "viridis", clim=None,
                 window_size=(900, 800), title: str | None = None,
                 time: float | None = None) -> Path:
    """Render ``field`` of one frame to ``png``; returns the path written.  The picture
    has axes, a colour bar named by the field and its unit (when the frame states
    units), the title (default: the field and ``time``) and a note when ``clim`` clips
    the data."""
    pv = _pyvista()
    blocks = leaf_blocks(frame)
    units = frame_units(blocks)
    plotter = _scene(pv, blocks, field, clim=clim, contour=contour, outlines=outlines,
                     cmap=cmap, window_size=window_size,
                     title=title or time_title(field, time, units), units=units)
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    plotter.screenshot(str(png))
    plotter.close()
    return png


def render_gauges(path, field: str | None, png, *, window_size=(1000, 600)) -> Path:
    """The time series of every gauge of a gauge file (CSV or NetCDF, as
    :class:`forestpy.callbacks.Gauges` writes) for one ``field`` (default: ``surface``
    when recorded, else the first) in one chart: axes with units where the file states
    them, a legend of the gauge ids.  VisClaw's gauge plots."""
    from forestpy.callbacks import read_gauge_units, read_gauges

    pv = _pyvista()
    data = read_gauges(path)
    if not data:
        raise ValueError(f"{path}: no gauges")
    names = [k for k in next(iter(data.values())) if k not in ("t", "x", "y")]
    field = field or ("surface" if "surface" in names else names[0])
    if field not in names:
        raise ValueError(f"{path}: no gauge field {field!r}; fields: {names}")
    units = read_gauge_units(path)
    t0 = min(float(d["t"][0]) for d in data.values())
    t1 = max(float(d["t"][-1]) for d in data.values())
    tu = units.get("t")
    chart = line_chart(title=f"gauges: {field}, t = {t0:.4g} to {t1:.4g}"
                       + (f" {tu}" if tu else ""),
                       xlabel=label("t", tu), ylabel=label(field, units.get(field)))
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
    for k, (gid, d) in enumerate(data.items()):
        add_line(chart, d["t"], d[field], color=colours[k % len(colours)],
                 label=f"{gid} ({d['x'][0]:.6g}, {d['y'][0]:.6g})")
    plotter = pv.Plotter(off_screen=True, window_size=list(window_size))
    plotter.add_chart(chart)
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    plotter.screenshot(str(png))
    plotter.close()
    return png


#: units of the fgmax fields (:class:`forestpy.extensions.geoclaw.fgmax.FGMax`)
FGMAX_UNITS = {"max_depth": "m", "max_speed": "m s-1", "max_surface": "m",
               "arrival_time": "s", "bed": "m"}


def render_fgmax(path, field: str | None, png, *, window_size=(900, 800)) -> Path:
    """A map of one field of an fgmax ``.npz`` (default ``max_depth``; cells that
    stayed dry, depth 0 or NaN, left out) with axes, colour bar and units."""
    pv = _pyvista()
    with np.load(path) as f:
        res = {k: f[k] for k in f.files}
    field = field or "max_depth"
    if field not in FGMAX_UNITS or field not in res:
        raise ValueError(f"{path}: no fgmax field {field!r}; fields: "
                         f"{[k for k in FGMAX_UNITS if k in res]}")
    x, y, v = res["x"], res["y"], np.asarray(res[field], np.float64)
    if x.ndim != 2 or min(x.shape) < 2:
        raise ValueError(f"{path}: the fgmax points are not a 2D grid; open fgmax.vtp")
    if field == "max_depth":
        v = np.where(v > 0, v, np.nan)
    plotter = pv.Plotter(off_screen=True, window_size=list(window_size))
    plotter.set_background("white")
    grid_map(plotter, x, y, v, name=field.replace("_", " "), unit=FGMAX_UNITS[field])
    crs = str(res["crs"]) if "crs" in res and str(res["crs"]) else None
    decorate(plotter, title=f"fgmax: {field.replace('_', ' ')} over the run",
             xlabel="x (m)", ylabel="y (m)", note=crs,
             bounds=(x.min(), x.max(), y.min(), y.max(), 0.0, 0.0))
    plotter.view_xy()
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
        units = frame_units(blocks)
        plotter = _scene(pv, blocks, field, clim=clim, contour=contour, outlines=outlines,
                         cmap=cmap, window_size=window_size,
                         title=time_title(field, t, units), units=units)
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
