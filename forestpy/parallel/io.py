"""Per-rank output of a distributed :class:`~forestpy.Simulation`.

:func:`write_frame_distributed` writes a ParaView overlapping-AMR frame without
gathering the state: every rank writes the ``.vti`` blocks of the patches it owns, and
rank 0 alone writes the ``.vthb`` index (it knows every block from the replicated
forest).  The frame holds the leaves only (``coarse_levels=False`` of
:func:`forestpy.io.vtk.write_frame`: an ancestor's children may live on several ranks);
ParaView shows the same finest data.  :class:`ParallelVTKOutput` is the
:class:`~forestpy.io.vtk.VTKOutput` callback writing such frames (rank 0 keeps the
``.pvd``); :class:`ParallelGauges` the :class:`~forestpy.callbacks.Gauges` whose
samples each rank reads in its own patches (gathered values, not the state), rank 0
writing the file.  :func:`~forestpy.parallel.distribute` replaces the ``kind="amr"``
VTKOutput and the Gauges callbacks of a simulation by such objects made from them
(:meth:`ParallelVTKOutput.of`, :meth:`ParallelGauges.of`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time as _time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from forestpy.callbacks import Gauges
from forestpy.io.vtk import (
    LEVELS_EXT,
    VTKOutput,
    _block,
    _check_frame_tolerance,
    _round_frame,
    _set_compression,
    _spacing,
    _vtk,
    frame_data,
    levels_index,
    parse_compression,
)

__all__ = ["ParallelGauges", "ParallelVTKOutput", "write_frame_distributed"]


class _OwnedGeometry:
    """The geometry of the patches ``lo:hi`` (what :func:`frame_data` reads)."""

    def __init__(self, geom, lo, hi):
        self._geom, self.npatch = geom, hi - lo
        self.level, self.gqx, self.gqy = geom.level[lo:hi], geom.gqx[lo:hi], geom.gqy[lo:hi]

    def __getattr__(self, name):
        return getattr(self._geom, name)


def _owned_view(sim):
    layout = sim.layout
    lo, hi, rows = layout.lo, layout.hi, layout.owned_rows(sim._full)  # either numbering
    return SimpleNamespace(geom=_OwnedGeometry(sim.geom, lo, hi), backend=sim.backend,
                           riemann=sim.riemann, q=sim.q[rows], aux=sim.aux[rows],
                           params=sim.params)


def _extremes(values: np.ndarray) -> list[tuple[float, float]]:
    """Per field (axis 1) the smallest and largest finite value (inf, -inf: none)."""
    out = []
    for k in range(values.shape[1]):
        v = values[:, k]
        v = v[np.isfinite(v)]
        out.append((float(v.min()), float(v.max())) if v.size else (np.inf, -np.inf))
    return out


def _global_tolerance(tolerance, names, extremes) -> dict:
    """``tolerance`` as ``{field: absolute}``: a relative one times each field's range
    over every rank's blocks (``extremes``: each rank's :func:`_extremes`)."""
    if not isinstance(tolerance, float):
        return tolerance
    out = {}
    for k, name in enumerate(names):
        lo = min(e[k][0] for e in extremes)
        hi = max(e[k][1] for e in extremes)
        out[name] = tolerance * (hi - lo) if hi >= lo else 0.0
    return out


def _merge_reports(reports: list[dict]) -> dict:
    """The frame's report from the ranks' reports of their blocks: largest errors,
    summed totals."""
    out: dict = {}
    for rep in reports:
        for name, entry in rep.items():
            if name not in out:
                out[name] = dict(entry)
                continue
            acc = out[name]
            acc["max_error"] = max(acc["max_error"], entry["max_error"])
            for key in ("total", "total_rounded", "total_change", "total_abs"):
                if key in entry:
                    acc[key] += entry[key]
    return out


def write_frame_distributed(sim, path_stem, time: float | None = None, tolerance=None,
                            compression=None, report: dict | None = None) -> Path:
    """Collective: write one AMR frame (leaves) of ``sim``, each rank its own blocks,
    rank 0 the ``.vthb`` and the levels view ``.vtm`` (see :mod:`forestpy.io.vtk`);
    returns the ``.vthb``'s path on every rank.  Blocks are written into a
    temporary folder that is renamed into place before the index appears (a crash
    leaves no index pointing at missing blocks).  ``tolerance``, ``compression`` and
    ``report`` as in :func:`~forestpy.io.vtk.write_frame` (a relative tolerance is
    relative to each field's range over every rank's blocks; the report, on every rank,
    sums the ranks' totals)."""
    comm, rank, lo = sim.comm, sim.exchange.rank, sim.layout.lo
    if tolerance is not None:
        tolerance = _check_frame_tolerance(tolerance)
        if compression is None:
            compression = "zlib"
    compression = parse_compression(compression)
    vtk = _vtk()
    from vtkmodules.vtkIOXML import vtkXMLImageDataWriter

    stem = Path(path_stem)
    if stem.suffix == ".vthb":
        stem = stem.with_suffix("")
    if not stem.name or stem.name in (".", ".."):
        raise ValueError(f"path_stem {path_stem!r}: no frame name")
    directory, name = stem.parent, stem.name
    tmp = None
    if rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        (Path(tmp) / name).mkdir()
    tmp = Path(comm.bcast(tmp, root=0))
    t = float(sim.t if time is None else time)
    error, fd, extremes, mine = None, None, None, {}
    try:
        fd = frame_data(_owned_view(sim))
        extremes = _extremes(fd["values"])
    except Exception as err:  # every rank must learn of it, or rank 0 would wait forever
        error = f"rank {rank}: {err}"
    gathered = comm.allgather((error, extremes))
    first = [e for e, _ in gathered if e]
    try:
        if first:
            raise RuntimeError(first[0])
        if tolerance is not None:
            tol = _global_tolerance(tolerance, fd["names"], [x for _, x in gathered])
            mine = _round_frame(fd, tol) if len(fd["level"]) else {}
        time_array = vtk["vtkDoubleArray"]()
        time_array.SetName("TimeValue")
        time_array.InsertNextValue(t)
        for k in range(sim.layout.nown):
            hx, hy = _spacing(fd, int(fd["level"][k]))
            writer = vtkXMLImageDataWriter()
            writer.SetInputData(_block(vtk, fd, k, hx, hy, time_array))
            writer.SetFileName(str(tmp / name / f"{name}_{lo + k}.vti"))
            writer.SetDataModeToAppended()
            writer.EncodeAppendedDataOff()
            if compression is not None:
                _set_compression(writer, *compression)
            if not writer.Write():
                raise OSError(f"VTK could not write block {lo + k} of {stem}.vthb")
    except Exception as err:  # every rank must learn of it, or rank 0 would wait forever
        error = first[0] if first else f"rank {rank}: {err}"
    gathered = comm.allgather((error, mine))
    errors = [e for e, _ in gathered if e]
    if report is not None and not errors:
        report.update(_merge_reports([r for _, r in gathered if r]))
    final = directory / f"{name}.vthb"
    if rank == 0:
        try:
            if not errors:
                (tmp / f"{name}.vthb").write_text(_index(sim, name, t))
                level = np.asarray(sim.geom.level)
                leaves = [(int(level[p]), p, f"{name}/{name}_{p}.vti")
                          for p in range(len(level))]
                (tmp / f"{name}{LEVELS_EXT}").write_text(levels_index(leaves))
                if (directory / name).exists():
                    shutil.rmtree(directory / name)
                os.replace(tmp / name, directory / name)
                os.replace(tmp / f"{name}.vthb", final)
                os.replace(tmp / f"{name}{LEVELS_EXT}", directory / f"{name}{LEVELS_EXT}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    comm.Barrier()
    if errors:
        raise OSError(f"frame {stem}.vthb not written: {errors[0]}")
    return final


def _index(sim, name: str, t: float) -> str:
    """The ``.vthb`` of the leaves: per level, the blocks in patch order."""
    geom = sim.geom
    level = np.asarray(geom.level)
    lmin, lmax = int(level.min()), int(level.max())
    (x0, y0) = (float(v) for v in geom.domain_lower)
    lines = ['<VTKFile type="vtkOverlappingAMR" version="1.1" byte_order="LittleEndian" '
             'header_type="UInt32">',
             f'  <vtkOverlappingAMR origin="{x0!r} {y0!r} 0" grid_description="XY">']
    fd = {"lower": geom.domain_lower, "upper": geom.domain_upper,
          "ncells": {lev: geom.ncells_at(lev) for lev in range(lmin, lmax + 1)}}
    for k, lev in enumerate(range(lmin, lmax + 1)):
        hx, hy = _spacing(fd, lev)
        lines.append(f'    <Block level="{k}" spacing="{hx!r} {hy!r} {hx!r}">')
        for j, p in enumerate(np.flatnonzero(level == lev)):
            bx, by = int(geom.gqx[p]) * geom.mx, int(geom.gqy[p]) * geom.my
            lines.append(f'      <DataSet index="{j}" amr_box="{bx} {bx + geom.mx - 1} {by} '
                         f'{by + geom.my - 1} 0 -1" file="{name}/{name}_{p}.vti"/>')
        lines.append("    </Block>")
    lines += ["  </vtkOverlappingAMR>", "</VTKFile>", ""]
    return "\n".join(lines)


class ParallelVTKOutput(VTKOutput):
    """:class:`~forestpy.io.vtk.VTKOutput` for a distributed run: every rank calls it
    (``collective``), each writes its blocks, rank 0 writes the frame index and the
    ``.pvd``.  Frames hold the leaves only."""

    collective = True

    @classmethod
    def of(cls, output: VTKOutput) -> ParallelVTKOutput:
        """A ParallelVTKOutput with the settings and the state of ``output`` (a
        ``kind="amr"`` :class:`~forestpy.io.vtk.VTKOutput`; its lists are shared)."""
        if output.kind != "amr":
            raise ValueError("ParallelVTKOutput writes kind='amr' frames only")
        new = cls.__new__(cls)
        new.__dict__.update(vars(output))
        return new

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.kind != "amr":
            raise ValueError("ParallelVTKOutput writes kind='amr' frames only")

    def write(self, sim) -> Path:
        self._due(sim)
        start = _time.perf_counter()
        used = {f for _, f in self.pvd.entries}
        while {f"{self.name}_{self._index:04d}{ext}" for ext in (".vthb", LEVELS_EXT)} & used:
            self._index += 1
        report = {} if self.tolerance is not None else None
        path = write_frame_distributed(sim, self.out_dir / f"{self.name}_{self._index:04d}",
                                       tolerance=self.tolerance,
                                       compression=self.compression, report=report)
        path = path.with_suffix(LEVELS_EXT)
        if report is not None:
            self._record_rounding(sim, path, report, write=sim.exchange.rank == 0)
        if sim.exchange.rank == 0:
            self.pvd.add(float(sim.t), path.name)
        else:
            self.pvd.entries.append((float(sim.t), path.name))
        self._index += 1
        self._last = (int(sim.steps), float(sim.t))
        self.written.append((float(sim.t), int(sim.steps), path))
        self.seconds += _time.perf_counter() - start
        return path


class ParallelGauges(Gauges):
    """:class:`~forestpy.callbacks.Gauges` for a distributed run: every rank calls it
    (``collective``; each rank gathers the gauges in its own patches on its device, and
    the flushes allgather only the sampled values), so every rank holds the series;
    rank 0 alone writes the file at ``on_end``."""

    collective = True

    @classmethod
    def of(cls, gauges: Gauges) -> ParallelGauges:
        """A ParallelGauges with the settings and the state of ``gauges`` (its lists
        are shared)."""
        new = cls.__new__(cls)
        new.__dict__.update(vars(gauges))
        return new

    def on_end(self, sim) -> None:
        self.flush()  # collective: the ranks' samples are assembled on every rank
        if sim.exchange.rank == 0:
            super().on_end(sim)
        sim.exchange.barrier()  # the file exists on return, on every rank
