"""ParaView output: VTK overlapping-AMR frames, flat multiblock frames, ``.pvd`` collections.

A *frame* is the state of a :class:`~forestpy.Simulation` at one time, written with the
XML writers of the ``vtk`` package (``pip install 'forestpy[io]'``):

``kind="amr"`` (default)
    A ``vtkOverlappingAMR`` dataset: ``NAME.vthb`` plus one ``.vti`` image block per
    patch in the folder ``NAME/``, and beside it ``NAME.vtm``, a multiblock index of the
    same leaf blocks grouped by level (see *Levels view* below).  AMR level 0 is the
    coarsest forest level present, the origin is the domain's lower corner, every block
    carries its AMR box (global cell indices of its level) and the spacing of its
    level.  Besides the leaves the frame holds every *ancestor* patch down to the
    coarsest level, filled with the 2x2 averages of its children, so each level covers
    the whole refined region; the cells of a block covered by a finer block are blanked
    (``vtkGhostType`` flag ``REFINEDCELL``, from ``vtkAMRUtilities.BlankCells``), and
    ParaView's AMR reader shows the finest data everywhere.  ``coarse_levels=False``
    writes the leaves only (nothing is covered then, nothing is blanked).
``kind="flat"``
    A ``vtkMultiBlockDataSet`` (``NAME.vtm`` plus ``NAME/*.vti``): one block per level
    (``level L``), holding one image block per leaf patch of that level.  Leaves never
    overlap, so readers without AMR support show it right.

*Levels view.*  The ``.pvd`` collection of :class:`VTKOutput` lists the ``.vtm`` file of
every frame, for both kinds: ParaView's PVD reader opens each with its multiblock
reader, which reads every block, so opening ``frame.pvd`` shows every refinement level
with the simulation times.  (A ``.pvd`` listing ``.vthb`` files would not: the PVD
reader gives the AMR reader no "Default Number Of Levels", and before ParaView 5.13
that reader's default was one level, so every finer level came back empty.)  The
``.vtm`` of an AMR frame references the leaf blocks that ``NAME/`` already holds, so
the data is on disk once; the ``.vthb`` stays the file to open for AMR-aware filters.

Cell data: the solver's ``field_names`` and its ``derived_fields``, interior cells only
(no ghost cells); every block also carries a one-value field-data array ``TimeValue``
and, when the simulation has ``units`` (``{name: unit}``, e.g. GeoClaw runs: SI), a
string ``units`` (``"h=m, ..., x=m, t=s"``).

Frames are written into a temporary folder next to the destination and then renamed
into place (the block folder first, then the ``.vthb``, the ``.vtm`` last), so a crash
never leaves a frame file pointing at missing or half-written blocks.

:class:`PVDCollection` indexes frames by simulation time (a ``.pvd`` file that
ParaView opens as a time series); :class:`VTKOutput` is a run callback writing frames
by step count and/or simulation time.

Example::

    from forestpy.io.vtk import VTKOutput
    sim = setup(max_level=4)
    sim.callbacks.append(VTKOutput("out/radial", interval=0.1))
    sim.run()   # out/radial/frame.pvd, frame_0000.vtm, frame_0000.vthb, frame_0000/, ...
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time as _time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from forestpy.io.summary import atomic_path, write_text_atomic

__all__ = [
    "FRAME_KINDS",
    "LEVELS_EXT",
    "levels_index",
    "frame_data",
    "write_frame",
    "COMPRESSORS",
    "parse_compression",
    "PVDCollection",
    "read_pvd",
    "VTKOutput",
    "GridOutput",
    "write_grid_frame",
    "write_points",
]

#: Frame kinds and the extension of their index file.
FRAME_KINDS = {"amr": ".vthb", "flat": ".vtm"}
#: The extension of the per-level multiblock index that a ``.pvd`` lists (both kinds).
LEVELS_EXT = ".vtm"


def _check_kind(kind) -> str:
    if kind not in FRAME_KINDS:
        raise ValueError(f"unknown VTK frame kind {kind!r}; valid: {sorted(FRAME_KINDS)}")
    return kind


def _vtk():
    """The VTK classes used here (imported on first use: ``vtk`` is optional)."""
    try:
        from vtkmodules.util.numpy_support import numpy_to_vtk
        from vtkmodules.vtkCommonCore import vtkDoubleArray
        from vtkmodules.vtkCommonDataModel import (
            vtkAMRBox,
            vtkAMRUtilities,
            vtkCompositeDataSet,
            vtkMultiBlockDataSet,
            vtkOverlappingAMR,
            vtkUniformGrid,
        )
        from vtkmodules.vtkIOXML import (
            vtkXMLMultiBlockDataWriter,
            vtkXMLUniformGridAMRWriter,
        )
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "VTK output needs the 'vtk' package: pip install 'forestpy[io]' (or pip install vtk)"
        ) from exc
    return dict(
        numpy_to_vtk=numpy_to_vtk,
        vtkDoubleArray=vtkDoubleArray,
        vtkAMRBox=vtkAMRBox,
        vtkAMRUtilities=vtkAMRUtilities,
        vtkCompositeDataSet=vtkCompositeDataSet,
        vtkMultiBlockDataSet=vtkMultiBlockDataSet,
        vtkOverlappingAMR=vtkOverlappingAMR,
        vtkUniformGrid=vtkUniformGrid,
        vtkXMLMultiBlockDataWriter=vtkXMLMultiBlockDataWriter,
        vtkXMLUniformGridAMRWriter=vtkXMLUniformGridAMRWriter,
    )


# ---------------------------------------------------------------------------- data
def _coarsen(a, npar, inv, ox, oy, mx, my):
    """Parents ``(npar, m, my, mx)`` from children ``a``: child ``c`` fills the quarter
    ``(oy[c], ox[c])`` of parent ``inv[c]`` with its 2x2 averages."""
    m, hx, hy = a.shape[1], mx // 2, my // 2
    avg = a.reshape(len(a), m, hy, 2, hx, 2).mean(axis=(3, 5))
    out = np.empty((npar, m, my, mx), dtype=a.dtype)
    out.reshape(npar, m, 2, hy, 2, hx)[inv, :, oy, :, ox, :] = avg
    return out


def _ancestors(level, gqx, gqy, q, aux, mx: int, my: int):
    """Ancestor patches of the leaves down to the coarsest leaf level.

    Returns ``(level, gqx, gqy, q, aux)`` of the ancestors only (coarsest last), each
    filled with the 2x2 cell averages of its four children (leaves or ancestors).
    Vectorised per level.
    """
    lmin, lmax = int(level.min()), int(level.max())
    out = []
    carry = None  # ancestors at the level being processed, from the finer level
    for lev in range(lmax, lmin, -1):
        sel = level == lev
        cx, cy, cq, ca = gqx[sel], gqy[sel], q[sel], aux[sel]
        if carry is not None:
            cx = np.concatenate([cx, carry[0]])
            cy = np.concatenate([cy, carry[1]])
            cq = np.concatenate([cq, carry[2]])
            ca = np.concatenate([ca, carry[3]])
        px, py = cx >> 1, cy >> 1
        key = px.astype(np.int64) * (np.int64(1) << 31) + py
        ukey, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        counts = np.bincount(inv, minlength=len(ukey))
        if not (counts == 4).all():
            raise ValueError(f"forest level {lev}: a parent without exactly 4 children")
        npar = len(ukey)
        ox, oy = cx & 1, cy & 1

        carry = (
            px[first],
            py[first],
            _coarsen(cq, npar, inv, ox, oy, mx, my),
            _coarsen(ca, npar, inv, ox, oy, mx, my),
        )
        out.append((np.full(npar, lev - 1, dtype=np.int64),) + carry)
    if not out:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, q[:0], aux[:0]
    return tuple(np.concatenate([o[k] for o in out]) for k in range(5))


def frame_data(sim, coarse_levels: bool = False) -> dict:
    """The host arrays a frame is made of (also useful for tests and plots).

    Returns a dict with ``names`` (field names then derived names), ``values``
    ``(nblock, nvar, my, mx)`` (interior cells), ``level``, ``gqx``, ``gqy`` (per
    block), ``leaf`` (bool per block: a leaf of the forest; the leaves come first, in
    the order of ``sim.geom``), ``mx``, ``my``, ``lower``, ``upper``, ``ncells``
    (``level -> (NX, NY)`` cells across the domain).  With ``coarse_levels`` the
    ancestor patches (see the module docstring) follow the leaves.
    """
    geom, be, riemann = sim.geom, sim.backend, sim.riemann
    mx, my, b = geom.mx, geom.my, geom.mbc
    q = np.asarray(be.to_host(sim.q))[:, :, b : b + my, b : b + mx]
    if riemann.num_aux:
        aux = np.asarray(be.to_host(sim.aux))[:, :, b : b + my, b : b + mx]
    else:
        aux = np.zeros((geom.npatch, 0, my, mx), dtype=q.dtype)
    level = np.asarray(geom.level, dtype=np.int64)
    gqx = np.asarray(geom.gqx, dtype=np.int64)
    gqy = np.asarray(geom.gqy, dtype=np.int64)
    leaf = np.ones(geom.npatch, dtype=bool)
    if coarse_levels and geom.npatch:
        al, ax, ay, aq, aa = _ancestors(level, gqx, gqy, q, aux, mx, my)
        level = np.concatenate([level, al])
        gqx = np.concatenate([gqx, ax])
        gqy = np.concatenate([gqy, ay])
        q = np.concatenate([q, aq])
        aux = np.concatenate([aux, aa])
        leaf = np.concatenate([leaf, np.zeros(len(al), dtype=bool)])
    names = list(riemann.field_names)
    derived = dict(getattr(riemann, "derived_fields", None) or {})
    params = np.asarray(sim.params, dtype=np.float64)
    nblk = len(level)
    values = np.empty((nblk, len(names) + len(derived), my, mx), dtype=q.dtype)
    nf = len(names)
    values[:, :nf] = q
    for k, (name, fn) in enumerate(derived.items()):
        arr = np.asarray(fn(q, aux, params))
        if arr.shape != (nblk, my, mx):
            raise ValueError(
                f"derived field {name!r} of {riemann.name!r} returned shape {arr.shape}, "
                f"expected {(nblk, my, mx)}"
            )
        values[:, nf + k] = arr
        names.append(name)
    levels = range(int(level.min()), int(level.max()) + 1) if nblk else range(0)
    return dict(
        names=names,
        nconserved=nf,
        values=values,
        level=level,
        gqx=gqx,
        gqy=gqy,
        leaf=leaf,
        mx=mx,
        my=my,
        lower=tuple(float(v) for v in geom.domain_lower),
        upper=tuple(float(v) for v in geom.domain_upper),
        ncells={lev: geom.ncells_at(lev) for lev in levels},
    )


def _spacing(fd, lev):
    nx, ny = fd["ncells"][lev]
    (x0, y0), (x1, y1) = fd["lower"], fd["upper"]
    return (x1 - x0) / nx, (y1 - y0) / ny


def _block(vtk, fd, i, hx, hy, time_array):
    """One ``vtkUniformGrid`` for block ``i`` with its cell arrays (no copies)."""
    mx, my = fd["mx"], fd["my"]
    x0, y0 = fd["lower"]
    grid = vtk["vtkUniformGrid"]()
    grid.SetOrigin(x0 + int(fd["gqx"][i]) * mx * hx, y0 + int(fd["gqy"][i]) * my * hy, 0.0)
    grid.SetSpacing(hx, hy, hx)
    grid.SetDimensions(mx + 1, my + 1, 1)
    cd = grid.GetCellData()
    vals = fd["values"]
    for k, name in enumerate(fd["names"]):
        arr = vtk["numpy_to_vtk"](vals[i, k].reshape(-1), deep=0)
        arr.SetName(name)
        cd.AddArray(arr)
    if time_array is not None:
        grid.GetFieldData().AddArray(time_array)
    if fd.get("units"):
        from vtkmodules.vtkCommonCore import vtkStringArray

        units = vtkStringArray()
        units.SetName("units")
        units.InsertNextValue(fd["units"])
        grid.GetFieldData().AddArray(units)
    return grid


def _build_amr(vtk, fd, time_array):
    level = fd["level"]
    lmin = int(level.min())
    nlev = int(level.max()) - lmin + 1
    mx, my = fd["mx"], fd["my"]
    amr = vtk["vtkOverlappingAMR"]()
    order = [np.flatnonzero(level == lmin + k) for k in range(nlev)]  # leaves first
    amr.Initialize([len(o) for o in order])
    amr.SetOrigin((fd["lower"][0], fd["lower"][1], 0.0))
    for k in range(nlev):
        hx, hy = _spacing(fd, lmin + k)
        amr.SetSpacing(k, (hx, hy, hx))
        for j, i in enumerate(order[k]):
            lo_x, lo_y = int(fd["gqx"][i]) * mx, int(fd["gqy"][i]) * my
            # hi z = lo z - 1: an empty third dimension (a 2D box)
            box = vtk["vtkAMRBox"](lo_x, lo_y, 0, lo_x + mx - 1, lo_y + my - 1, -1)
            amr.SetAMRBox(k, j, box)
            amr.SetDataSet(k, j, _block(vtk, fd, i, hx, hy, time_array))
    vtk["vtkAMRUtilities"].BlankCells(amr)
    return amr


def _build_flat(vtk, fd, time_array):
    """One block per level (``level L``), each a multiblock of that level's leaves
    (``patch P``, P the leaf's index in ``sim.geom``)."""
    leaves = np.flatnonzero(fd["leaf"])
    levels = fd["level"][leaves]
    name_key = vtk["vtkCompositeDataSet"].NAME()
    top = vtk["vtkMultiBlockDataSet"]()
    present = sorted({int(v) for v in levels})
    top.SetNumberOfBlocks(len(present))
    for k, lev in enumerate(present):
        hx, hy = _spacing(fd, lev)
        mine = leaves[levels == lev]
        mb = vtk["vtkMultiBlockDataSet"]()
        mb.SetNumberOfBlocks(len(mine))
        for j, i in enumerate(mine):
            mb.SetBlock(j, _block(vtk, fd, i, hx, hy, time_array))
            mb.GetMetaData(j).Set(name_key, f"patch {int(i)}")
        top.SetBlock(k, mb)
        top.GetMetaData(k).Set(name_key, f"level {lev}")
    return top


def levels_index(blocks) -> str:
    """The text of a ``.vtm`` multiblock file: one block per level, named ``level L``,
    holding the image files of that level.  ``blocks`` is ``(level, patch, file)`` per
    leaf block, ``file`` relative to the ``.vtm``'s folder, in the order to list."""
    by_level: dict[int, list] = {}
    for lev, patch, f in blocks:
        by_level.setdefault(int(lev), []).append((int(patch), str(f)))
    lines = ['<?xml version="1.0"?>',
             '<VTKFile type="vtkMultiBlockDataSet" version="1.0" byte_order="LittleEndian" '
             'header_type="UInt32">',
             "  <vtkMultiBlockDataSet>"]
    for k, lev in enumerate(sorted(by_level)):
        lines.append(f'    <Block index="{k}" name="level {lev}">')
        for j, (patch, f) in enumerate(by_level[lev]):
            lines.append(f'      <DataSet index="{j}" name="patch {patch}" '
                         f'file={quoteattr(f)}/>')
        lines.append("    </Block>")
    lines += ["  </vtkMultiBlockDataSet>", "</VTKFile>", ""]
    return "\n".join(lines)


def _amr_leaf_files(vthb: Path, fd) -> list[tuple[int, int, str]]:
    """``(level, patch, file)`` of the leaf blocks of the ``.vthb`` that VTK just wrote
    from ``fd`` (:func:`_build_amr`'s order: per level, the blocks in ``fd`` order)."""
    root = ET.parse(vthb).getroot()
    level, leaf = fd["level"], fd["leaf"]
    lmin = int(level.min())
    out = []
    for block in root.iter("Block"):
        k = int(block.get("level"))
        order = np.flatnonzero(level == lmin + k)
        for ds in block.iter("DataSet"):
            i = int(order[int(ds.get("index"))])
            if leaf[i] and ds.get("file"):
                out.append((lmin + k, i, ds.get("file")))
    if len(out) != int(leaf.sum()):
        raise OSError(f"{vthb}: {len(out)} leaf blocks listed, {int(leaf.sum())} written")
    return out


#: the XML writers' lossless compressors (``vtkXMLWriter.SetCompressorTypeTo...``)
COMPRESSORS = ("zlib", "lz4", "lzma", "none")


def parse_compression(spec) -> tuple[str, int | None] | None:
    """``"zlib"``, ``"lz4:1"``, ``"lzma:9"``, ``"none"`` -> ``(compressor, level)``
    (level 1-9, None: the compressor's default); ``None`` -> None (VTK's default, zlib).
    Anything else raises ``ValueError`` with one message."""
    if spec is None:
        return None
    if isinstance(spec, tuple):
        name, level = spec
    else:
        name, _, level = str(spec).strip().partition(":")
        level = level.strip() or None
    name = str(name).strip().lower()
    if name not in COMPRESSORS:
        raise ValueError(f"frame compression {spec!r}: unknown compressor {name!r}; "
                         f"valid: {', '.join(COMPRESSORS)} (optionally :LEVEL, 1-9)")
    if level is not None:
        try:
            level = int(level)
        except (TypeError, ValueError):
            level = 0
        if name == "none" or not 1 <= level <= 9:
            raise ValueError(f"frame compression {spec!r}: the level is a whole number "
                             "1-9 (and 'none' takes none)")
    return name, level


def _set_compression(writer, name: str, level: int | None) -> None:
    if name == "none":
        writer.SetCompressorTypeToNone()
        return
    {"zlib": writer.SetCompressorTypeToZLib, "lz4": writer.SetCompressorTypeToLZ4,
     "lzma": writer.SetCompressorTypeToLZMA}[name]()
    if level is not None:
        writer.SetCompressionLevel(level)


def _check_frame_tolerance(tolerance):
    """A frame tolerance checked up front: a number >= 0 or ``{name: number >= 0}``."""
    from collections.abc import Mapping

    from forestpy.io.bitround import check_tolerance

    if isinstance(tolerance, Mapping):
        return {str(k): check_tolerance(v, f"frame tolerance of {k!r}")
                for k, v in tolerance.items()}
    return check_tolerance(tolerance, "frame tolerance")


def _round_frame(fd, tolerance) -> dict:
    """Round ``fd["values"]`` in place to ``tolerance`` (see :mod:`forestpy.io.bitround`)
    and return the report: per field its absolute tolerance, the largest error, and
    for the solver's fields (conserved) the total over the leaves (value times cell
    area) before and after, and the total of the magnitudes (``total_abs``, the scale
    of the change for a field whose total is near 0)."""
    from forestpy.io.bitround import field_tolerances, round_to_tolerance

    vals = fd["values"]
    tols = field_tolerances(tolerance, fd["names"], vals)
    leaf = fd["leaf"]
    lmin, lmax = int(fd["level"].min()), int(fd["level"].max())
    per_level = np.array([math.prod(_spacing(fd, lev)) for lev in range(lmin, lmax + 1)])
    area = per_level[fd["level"][leaf] - lmin]
    fields = {}
    for k, (name, tol) in enumerate(zip(fd["names"], tols)):
        before = vals[leaf, k].reshape(int(leaf.sum()), -1).sum(axis=1) @ area
        vals[:, k], err = round_to_tolerance(vals[:, k], tol)
        entry = {"tolerance": tol, "max_error": err}
        if k < fd["nconserved"]:
            after = vals[leaf, k].reshape(int(leaf.sum()), -1).sum(axis=1) @ area
            scale = np.abs(vals[leaf, k]).reshape(int(leaf.sum()), -1).sum(axis=1) @ area
            entry.update(total=float(before), total_rounded=float(after),
                         total_change=float(after - before), total_abs=float(scale))
        fields[name] = entry
    return fields


def _write_atomic(vtk, dataset, kind: str, stem: Path, fd=None, compression=None) -> Path:
    """Write ``dataset`` as ``stem + ext`` plus the block folder ``stem`` (and, for an
    AMR frame, the levels view ``stem.vtm`` of the leaves in ``fd``), atomically;
    ``compression`` a ``(compressor, level)`` of :func:`parse_compression` (None: VTK's
    default)."""
    ext = FRAME_KINDS[kind]
    directory, name = stem.parent, stem.name
    directory.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=directory))
    # moved into place in this order: blocks, then the index files, the one a .pvd
    # lists last
    names = [name, f"{name}{ext}"] + ([f"{name}{LEVELS_EXT}"] if kind == "amr" else [])
    old = None  # a holding folder for the files of a frame being replaced
    held, placed = [], []
    try:
        writer = (
            vtk["vtkXMLUniformGridAMRWriter"]()
            if kind == "amr"
            else vtk["vtkXMLMultiBlockDataWriter"]()
        )
        writer.SetInputData(dataset)
        writer.SetFileName(str(tmp / f"{name}{ext}"))
        writer.SetDataModeToAppended()
        writer.EncodeAppendedDataOff()
        if compression is not None:
            _set_compression(writer, *compression)
        ok = writer.Write()
        if not ok or writer.GetErrorCode() or not (tmp / f"{name}{ext}").is_file():
            raise OSError(f"VTK could not write the frame {stem}{ext} (into {tmp})")
        if not (tmp / name).is_dir():  # an empty dataset writes no block folder
            (tmp / name).mkdir()
        if kind == "amr":
            files = _amr_leaf_files(tmp / f"{name}{ext}", fd)
            (tmp / f"{name}{LEVELS_EXT}").write_text(levels_index(files), encoding="utf-8")
        for n in names:
            final = directory / n
            if final.exists() or final.is_symlink():
                if old is None:
                    old = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".old",
                                                dir=directory))
                os.replace(final, old / n)
                held.append(n)
        for n in names:
            os.replace(tmp / n, directory / n)
            placed.append(n)
        return directory / f"{name}{ext}"
    except BaseException:
        # roll back: the new files out, the replaced frame's files back in
        for n in placed:
            p = directory / n
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        for n in held:
            os.replace(old / n, directory / n)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def write_points(path, x, y, point_data: dict, labels: Sequence | None = None,
                 z=None, meta: dict | None = None) -> Path:
    """Write points (gauges, fgmax points) with one value per point for each entry of
    ``point_data`` as a VTK PolyData file (``.vtp``) that ParaView opens beside the
    frames; ``labels`` become a string array ``label``; each entry of ``meta`` (e.g.
    ``units``, ``crs``) a one-string field-data array.  NaN values are kept (ParaView
    shows them as NaN colour).  Written to a temporary name and renamed."""
    try:
        from vtkmodules.util.numpy_support import numpy_to_vtk
        from vtkmodules.vtkCommonCore import vtkPoints, vtkStringArray
        from vtkmodules.vtkCommonDataModel import vtkCellArray, vtkPolyData
        from vtkmodules.vtkIOXML import vtkXMLPolyDataWriter
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("point output needs the 'vtk' package: pip install vtk") from exc
    path = Path(path)
    x = np.asarray(x, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    z = np.zeros_like(x) if z is None else np.asarray(z, np.float64).ravel()
    if not x.size == y.size == z.size:
        raise ValueError(f"write_points: {x.size} x, {y.size} y and {z.size} z values")
    points = vtkPoints()
    points.SetData(numpy_to_vtk(np.stack([x, y, z], axis=1), deep=True))
    verts = vtkCellArray()
    for k in range(x.size):  # output only, once per file
        verts.InsertNextCell(1)
        verts.InsertCellPoint(k)
    poly = vtkPolyData()
    poly.SetPoints(points)
    poly.SetVerts(verts)
    for name, values in point_data.items():
        values = np.asarray(values, np.float64).ravel()
        if values.size != x.size:
            raise ValueError(f"write_points: {name!r} has {values.size} values for "
                             f"{x.size} points")
        arr = numpy_to_vtk(values, deep=True)
        arr.SetName(str(name))
        poly.GetPointData().AddArray(arr)
    if labels is not None:
        names = vtkStringArray()
        names.SetName("label")
        for label in labels:
            names.InsertNextValue(str(label))
        poly.GetPointData().AddArray(names)
    for key, text in (meta or {}).items():
        arr = vtkStringArray()
        arr.SetName(str(key))
        arr.InsertNextValue(str(text))
        poly.GetFieldData().AddArray(arr)
    with atomic_path(path) as tmp:
        writer = vtkXMLPolyDataWriter()
        writer.SetInputData(poly)
        writer.SetFileName(tmp)
        if not writer.Write() or writer.GetErrorCode():
            raise OSError(f"VTK could not write {path}")
    return path


def write_frame(sim, path_stem, time: float | None = None, kind: str = "amr",
                coarse_levels: bool = True, tolerance=None, compression=None,
                report: dict | None = None) -> Path:
    """Write one frame of ``sim``; returns the path of the ``.vthb`` / ``.vtm`` file.

    ``path_stem`` is the frame's path without extension (an extension ``.vthb`` or
    ``.vtm`` is dropped): ``out/frame_0003`` gives ``out/frame_0003.vthb``, the block
    folder ``out/frame_0003/`` and (AMR) the levels view ``out/frame_0003.vtm``, the
    file to list in a ``.pvd``.  ``time`` (default ``sim.t``) goes into each block's
    ``TimeValue`` field data.  ``coarse_levels`` (``kind="amr"`` only) adds the
    averaged ancestor patches (see the module docstring).  A frame of the same name is
    replaced.  Raises ``ValueError`` for an unknown ``kind`` and ``OSError`` when the
    frame cannot be written (then nothing of the new frame is left behind).

    *Compressed frames* (docs/compression.md): ``tolerance`` (a number relative to each
    field's range in the frame, or ``{field: absolute}``; fields not named are exact)
    rounds every value to the fewest mantissa bits within its field's bound
    (:mod:`forestpy.io.bitround`), and ``compression`` (``"zlib"``, ``"lz4"``,
    ``"lzma"``, ``"none"``, optionally ``":LEVEL"`` 1-9; default ``"zlib"`` with a
    tolerance, VTK's default, zlib, without) is the XML writers' own compressor: the
    frame stays a plain VTK file.  ``report`` (a dict) receives per field the absolute
    tolerance, the largest error and, for the solver's (conserved) fields, the total
    over the leaves (value times cell area) before and after rounding.
    """
    _check_kind(kind)
    if tolerance is not None:
        tolerance = _check_frame_tolerance(tolerance)
        if compression is None:
            compression = "zlib"
    compression = parse_compression(compression)
    vtk = _vtk()
    stem = Path(path_stem)
    if stem.suffix in (".vthb", ".vtm"):
        stem = stem.with_suffix("")
    if not stem.name or stem.name in (".", ".."):
        raise ValueError(f"path_stem {path_stem!r}: no frame name")
    t = float(sim.t if time is None else time)
    fd = frame_data(sim, coarse_levels=coarse_levels and kind == "amr")
    if not len(fd["level"]):
        raise ValueError("the simulation has no patches to write")
    time_array = vtk["vtkDoubleArray"]()
    time_array.SetName("TimeValue")
    time_array.InsertNextValue(t)
    units = getattr(sim, "units", None)
    if units:  # "name=unit, ..." as field data beside the time (forestpy plot reads it)
        fd["units"] = ", ".join(f"{k}={v}" for k, v in units.items())
    if tolerance is not None:
        fields = _round_frame(fd, tolerance)
        if report is not None:
            report.update(fields)
    build = _build_amr if kind == "amr" else _build_flat
    return _write_atomic(vtk, build(vtk, fd, time_array), kind, stem, fd, compression)


# ---------------------------------------------------------------------------- grids
def write_grid_frame(path_stem, fields: dict, lower, spacing, time: float,
                     units: dict | None = None, block: str = "grid") -> Path:
    """Write one frame of a solver on a uniform grid (HWFV1, Boussinesq): ``fields``
    maps names to ``(ny, nx)`` cell arrays, ``lower`` is the grid's lower-left corner,
    ``spacing`` ``(dx, dy)``.  The frame has the layout of a flat frame (``NAME.vtm``:
    one block, named ``block``, holding one image block ``NAME/*.vti``), with the
    ``TimeValue`` and ``units`` field data, so ParaView and ``forestpy plot`` open it as
    any other.  Written atomically; returns the ``.vtm`` path."""
    vtk = _vtk()
    stem = Path(path_stem)
    if stem.suffix == LEVELS_EXT:
        stem = stem.with_suffix("")
    names = list(fields)
    arrays = [np.asarray(fields[n], dtype=np.float64) for n in names]
    if not arrays or any(a.ndim != 2 or a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"write_grid_frame: fields must be 2D arrays of one shape, got "
                         f"{[a.shape for a in arrays]}")
    ny, nx = arrays[0].shape
    fd = dict(names=names, values=np.stack(arrays)[None], gqx=np.zeros(1, np.int64),
              gqy=np.zeros(1, np.int64), mx=nx, my=ny, lower=tuple(map(float, lower)),
              units=", ".join(f"{k}={v}" for k, v in (units or {}).items()))
    time_array = vtk["vtkDoubleArray"]()
    time_array.SetName("TimeValue")
    time_array.InsertNextValue(float(time))
    grid = _block(vtk, fd, 0, float(spacing[0]), float(spacing[1]), time_array)
    name_key = vtk["vtkCompositeDataSet"].NAME()
    inner = vtk["vtkMultiBlockDataSet"]()
    inner.SetNumberOfBlocks(1)
    inner.SetBlock(0, grid)
    inner.GetMetaData(0).Set(name_key, "patch 0")
    top = vtk["vtkMultiBlockDataSet"]()
    top.SetNumberOfBlocks(1)
    top.SetBlock(0, inner)
    top.GetMetaData(0).Set(name_key, block)
    return _write_atomic(vtk, top, "flat", stem)


def _check_schedule(every_steps, interval) -> None:
    """The output cadence of a frame writer: a positive whole number of steps, a
    positive time interval."""
    if every_steps is not None and (int(every_steps) != every_steps or every_steps < 1):
        raise ValueError(f"every_steps must be a positive integer, got {every_steps!r}")
    if interval is not None and not float(interval) > 0:
        raise ValueError(f"output interval must be positive, got {interval!r}")


class GridOutput:
    """Frames of a solver that is not a Simulation (HWFV1, Boussinesq), written while
    it runs: the solver reports its steps (:func:`forestpy.callbacks.report_step`) to an
    open :func:`~forestpy.callbacks.progress_scope` holding this object, and has
    ``frame_fields()`` returning ``{"fields": {name: (ny, nx)}, "lower": (x0, y0),
    "spacing": (dx, dy), "units": {...}}``.

    A frame is written when a solver is first seen (at ``report_start``, or after its
    first step), after every ``every_steps``-th step, at the first step at or after each
    of ``times`` / every ``interval`` (the solvers do not shorten their steps to land on
    them: the frame holds the time it was taken at), and at the end of the scope.
    ``NAME.pvd`` lists them with their times, as :class:`VTKOutput` does.
    """

    def __init__(self, out_dir, name: str = "frame", every_steps: int | None = None,
                 times: Sequence[float] | None = None, interval: float | None = None):
        _check_schedule(every_steps, interval)
        self.out_dir = Path(out_dir)
        self.name = name
        self.every_steps = every_steps
        self.interval = None if interval is None else float(interval)
        self.times = sorted(float(t) for t in (times or ()))
        self.pvd = PVDCollection(self.out_dir / f"{name}.pvd")
        self.written: list[tuple[float, int, Path]] = []
        self._solver = None
        self._next_t = math.inf
        self._last = None

    @property
    def pvd_path(self) -> Path:
        return self.pvd.path

    def _schedule(self, t: float) -> None:
        later = [x for x in self.times if x > t + 1e-12 * max(1.0, abs(t))]
        if self.interval is not None:
            later.append(self.interval * (math.floor(t / self.interval + 1e-9) + 1))
        self._next_t = min(later, default=math.inf)

    def start(self, solver, t_final=None) -> None:
        if solver is self._solver:
            return
        self._solver = solver
        self.write(solver)

    def tick(self, solver, t_final=None) -> None:
        if solver is not self._solver:
            self.start(solver, t_final)
            return
        due = bool(self.every_steps) and solver.steps % self.every_steps == 0
        if due or solver.t >= self._next_t - 1e-12 * max(1.0, abs(solver.t)):
            self.write(solver)

    def close(self) -> None:
        if self._solver is not None:
            self.write(self._solver)

    def write(self, solver) -> Path | None:
        key = (int(solver.steps), float(solver.t))
        if key == self._last:
            return None
        f = solver.frame_fields()
        stem = self.out_dir / f"{self.name}_{len(self.pvd):04d}"
        path = write_grid_frame(stem, f["fields"], f["lower"], f["spacing"], solver.t,
                                f.get("units"), block=f.get("block", "grid"))
        self.pvd.add(float(solver.t), path.name)
        self.written.append((float(solver.t), int(solver.steps), path))
        self._last = key
        self._schedule(float(solver.t))
        return path


# ---------------------------------------------------------------------------- .pvd
class PVDCollection:
    """A ParaView data collection (``.pvd``): frames with their simulation times.

    ``add(time, frame_file)`` appends a frame and rewrites the file atomically, so the
    ``.pvd`` on disk always lists complete frames only.  File names are stored relative
    to the ``.pvd``'s folder.  :meth:`read` loads an existing collection.
    """

    def __init__(self, path, entries: Sequence[tuple[float, str]] = ()):
        self.path = Path(path)
        self.entries: list[tuple[float, str]] = [(float(t), str(f)) for t, f in entries]

    def _relative(self, frame_file) -> str:
        """A relative name is taken as relative to the ``.pvd``'s folder; an absolute
        path is made relative to it."""
        f = Path(frame_file)
        if f.is_absolute():
            try:
                f = Path(os.path.relpath(f.resolve(), self.path.parent.resolve()))
            except ValueError:  # another drive (Windows)
                f = f.resolve()
        return f.as_posix()

    def add(self, time: float, frame_file) -> None:
        t = float(time)
        if not math.isfinite(t):
            raise ValueError(f"frame time must be finite, got {time!r}")
        self.entries.append((t, self._relative(frame_file)))
        self.write()

    def text(self) -> str:
        lines = [
            '<?xml version="1.0"?>',
            '<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">',
            "  <Collection>",
        ]
        for t, f in self.entries:
            lines.append(
                f'    <DataSet timestep="{t!r}" group="" part="0" file={quoteattr(f)}/>'
            )
        lines += ["  </Collection>", "</VTKFile>", ""]
        return "\n".join(lines)

    def write(self) -> Path:
        return write_text_atomic(self.path, self.text())

    @classmethod
    def read(cls, path) -> PVDCollection:
        return cls(path, read_pvd(path))

    def __len__(self) -> int:
        return len(self.entries)


def read_pvd(path) -> list[tuple[float, str]]:
    """``[(time, file), ...]`` of a ``.pvd`` collection, in file order (file names as
    written, relative to the ``.pvd``'s folder)."""
    from forestpy.errors import InputFileError

    try:  # expat refuses entity expansion bombs (billion laughs) itself
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise InputFileError(f"{path}: not a readable .pvd file ({exc})") from None
    coll = root.find("Collection")
    if root.tag != "VTKFile" or root.get("type") != "Collection" or coll is None:
        raise InputFileError(f"{path}: not a VTK collection (.pvd) file")
    out = []
    for ds in coll.iter("DataSet"):
        try:
            t = float(ds.get("timestep", "0"))
        except ValueError:
            raise InputFileError(
                f"{path}: DataSet timestep {ds.get('timestep')[:40]!r} is not a number"
            ) from None
        out.append((t, ds.get("file", "")))
    return out


# ---------------------------------------------------------------------------- callback
class VTKOutput:
    """Run callback writing ParaView frames and the ``.pvd`` collection that indexes them.

    Parameters
    ----------
    out_dir : path
        Folder of the frames and of ``NAME.pvd``.
    name : str
        Frame file prefix: ``NAME_0000.vtm`` (the levels view, listed in ``NAME.pvd``)
        and, for ``kind="amr"``, ``NAME_0000.vthb``, ...
    kind : ``"amr"`` or ``"flat"``
        See :func:`write_frame`.
    every_steps : int, optional
        Write after every ``every_steps``-th accepted step (``sim.steps`` a multiple).
    times : sequence of float, optional
        Write at each of these times: the Simulation shortens the step before each
        so that it lands on it (:meth:`next_time`).
    interval : float, optional
        Output times ``t_start + k * interval`` up to ``t_final``.
    coarse_levels : bool
        See :func:`write_frame`.
    tolerance, compression
        Compressed frames, see :func:`write_frame`: bit rounding within ``tolerance``
        (relative to each field's range, or ``{field: absolute}``) and the writers'
        compressor (default ``"zlib"`` when a tolerance is given).  The error and the
        conserved totals of every frame are kept in :attr:`rounding`.

    The first frame is written at ``on_start`` and the last at ``on_end`` (unless the
    last step already wrote one).  ``written`` lists ``(sim.t, sim.steps, path)`` per
    frame (``path`` the ``.vtm`` the ``.pvd`` lists) and ``seconds`` the time spent
    writing.  When ``NAME.pvd`` exists and the run
    starts at ``t > 0`` (a restart), its frames before that time are kept and the
    numbering continues.
    """

    def __init__(self, out_dir, name: str = "frame", kind: str = "amr",
                 every_steps: int | None = None, times: Sequence[float] | None = None,
                 interval: float | None = None, coarse_levels: bool = True,
                 tolerance=None, compression=None):
        self.kind = _check_kind(kind)
        if tolerance is not None:
            tolerance = _check_frame_tolerance(tolerance)
            if compression is None:
                compression = "zlib"
        self.tolerance = tolerance
        self.compression = parse_compression(compression)
        #: per frame written with a tolerance: ``{"t", "file", "fields": report}``
        #: (see :func:`write_frame`), also written to ``NAME_rounding.json``
        self.rounding: list[dict] = []
        if not name or any(c in name for c in '/\\:*?"<>|') or name.startswith("."):
            raise ValueError(f"invalid frame name {name!r}")
        _check_schedule(every_steps, interval)
        self.out_dir = Path(out_dir)
        self.name = name
        self.every_steps = None if every_steps is None else int(every_steps)
        self.interval = None if interval is None else float(interval)
        self.requested_times = None if times is None else sorted(float(t) for t in times)
        self.coarse_levels = bool(coarse_levels)
        self.pvd = PVDCollection(self.out_dir / f"{name}.pvd")
        self.written: list[tuple[float, int, Path]] = []
        self.seconds = 0.0
        self._times: list[float] = []
        self._next = 0
        self._index = 0
        self._last = None

    timer_phase = "output"

    def next_time(self, sim) -> float | None:
        """The next output time (the Simulation's steps land on it), or None."""
        return self._times[self._next] if self._next < len(self._times) else None

    @property
    def pvd_path(self) -> Path:
        return self.pvd.path

    def _eps(self, sim) -> float:
        return 1e-12 * max(1.0, abs(float(sim.t_final)))

    def on_start(self, sim) -> None:
        t0, eps = float(sim.t), self._eps(sim)
        times = list(self.requested_times or [])
        if self.interval is not None:
            n = int(math.floor((float(sim.t_final) - t0) / self.interval + 1e-9))
            times += [t0 + k * self.interval for k in range(1, n + 1)]
        self._times = sorted(times)
        self._next = 0
        entries = []
        if t0 > 0 and self.pvd.path.is_file():
            entries = [(t, f) for t, f in read_pvd(self.pvd.path) if t < t0 - eps]
        self.pvd = PVDCollection(self.pvd.path, entries)
        self._index = len(entries)
        self.rounding = []
        log = self.out_dir / f"{self.name}_rounding.json"
        if t0 > 0 and self.tolerance is not None and log.is_file():  # a restart
            import json

            try:
                kept = json.loads(log.read_text(encoding="utf-8"))
                self.rounding = [r for r in kept if float(r["t"]) < t0 - eps]
            except (ValueError, TypeError, KeyError):
                self.rounding = []  # not ours: rewritten from this run's frames
        self.written = []
        self._last = None
        self.write(sim)

    def _due(self, sim) -> bool:
        due = bool(self.every_steps) and sim.steps % self.every_steps == 0
        eps = self._eps(sim)
        while self._next < len(self._times) and self._times[self._next] <= sim.t + eps:
            self._next += 1
            due = True
        return due

    def on_step(self, sim) -> None:
        if self._due(sim):
            self.write(sim)

    def on_end(self, sim) -> None:
        if self._last != (int(sim.steps), float(sim.t)):
            self.write(sim)

    def _record_rounding(self, sim, path: Path, report: dict, write: bool = True) -> None:
        import json

        self.rounding.append({"t": float(sim.t), "file": path.name, "fields": report})
        if write:
            write_text_atomic(self.out_dir / f"{self.name}_rounding.json",
                              json.dumps(self.rounding, indent=1) + "\n")

    def write(self, sim) -> Path:
        """Write a frame of ``sim`` now and add it to the ``.pvd``."""
        self._due(sim)  # output times up to now are served by this frame
        start = _time.perf_counter()
        used = {f for _, f in self.pvd.entries}
        while True:
            stem = self.out_dir / f"{self.name}_{self._index:04d}"
            if not {f"{stem.name}{FRAME_KINDS[self.kind]}", f"{stem.name}{LEVELS_EXT}"} & used:
                break
            self._index += 1
        report = {} if self.tolerance is not None else None
        write_frame(sim, stem, kind=self.kind, coarse_levels=self.coarse_levels,
                    tolerance=self.tolerance, compression=self.compression, report=report)
        path = stem.with_name(f"{stem.name}{LEVELS_EXT}")
        if report is not None:
            self._record_rounding(sim, path, report)
        self.pvd.add(float(sim.t), path.name)
        self._index += 1
        self._last = (int(sim.steps), float(sim.t))
        self.written.append((float(sim.t), int(sim.steps), path))
        self.seconds += _time.perf_counter() - start
        return path
