"""fgmax: maxima of the flow on a fixed grid of points, updated every step.

:class:`FGMax` is a callback (``on_start/on_step/on_end(sim)``) that samples, after
every accepted step, the cell of the finest leaf containing each point (the cell
``sim.sample`` reads) and keeps the maximum depth, maximum speed, maximum surface
elevation (over wet samples) and the first arrival time: the first sampled time at
which the depth exceeds ``arrival_depth`` and the surface departs from ``sea_level`` by
more than ``arrival_tol`` (NaN: never).  ``state_dict/load_state_dict`` make it
checkpointable.  :meth:`write` saves ``.npz`` and, for a grid, ESRI ASCII and GeoTIFF
files per field.

The maxima live where the state does: the points are located once per forest
(:class:`~forestpy.patches.point_samples.PointCells`) and one pointwise body,
:func:`_observe_point`, folds a step into them, run by a Numba loop on the CPU and by
one kernel launch on the GPU; the host copies them only when they are read (the
attributes, :meth:`results`, :meth:`state_dict`, :meth:`write`).

In a distributed run (``mpirun``) every rank calls it (``collective``) and folds the
points its own patches hold; no state is gathered.  :meth:`flush` (collective; called at
the end of the run and before a checkpoint) merges the ranks' maxima on every rank:
depth, speed and surface by their maximum over the ranks, the arrival time by the
earliest, the bed from the rank holding the point now.  Maxima and minima do not depend
on the order of the samples, so the merged maxima are bitwise the serial run's.
"""

from __future__ import annotations

import math
from pathlib import Path

import numba
import numpy as np

from forestpy.patches.point_samples import PointCells

from .rasters import Raster, write_esri_ascii, write_geotiff

__all__ = ["FGMax"]

FIELDS = ("max_depth", "max_speed", "max_surface", "arrival_time")
# rows of FGMax's maxima array: the fields, then the bed of the last sample
_ROWS = (*FIELDS, "bed")


@numba.njit(inline="always")
def _maximum(a, b):
    """``np.maximum`` of two floats, bit for bit: NaN if either is, ``b`` when equal
    (so that the sign of a zero follows NumPy's)."""
    return a if a > b or a != a else b


@numba.njit(inline="always")
def _observe_point(q, aux, cells, bed_field, maxima, t, dry_tolerance, arrival_depth,
                   sea_level, arrival_tol, k):
    """Fold the state at point ``k`` (cell ``cells[k] = (row, j, i)``; row -1: not
    here) into ``maxima[:, k]`` (rows :data:`_ROWS`); ``bed_field`` -1: flat bed at 0.
    Written as the NumPy fold it replaces computed it (``np.maximum``, the speed and
    surface of wet samples only), so the CPU results are bitwise those of before."""
    p, j, i = cells[k, 0], cells[k, 1], cells[k, 2]
    if p < 0:
        return
    h, hu, hv = float(q[p, 0, j, i]), float(q[p, 1, j, i]), float(q[p, 2, j, i])
    b = float(aux[p, bed_field, j, i]) if bed_field >= 0 else 0.0
    wet = h > dry_tolerance
    speed = math.sqrt(hu * hu + hv * hv) / h if wet else 0.0
    eta = h + b
    maxima[0, k] = _maximum(maxima[0, k], h)
    maxima[1, k] = _maximum(maxima[1, k], speed)
    if wet:
        maxima[2, k] = _maximum(maxima[2, k], eta)
    if maxima[3, k] != maxima[3, k] and h > arrival_depth and abs(eta - sea_level) > arrival_tol:
        maxima[3, k] = t
    maxima[4, k] = b


@numba.njit(cache=True)
def _observe_points(q, aux, cells, bed_field, maxima, t, dry_tolerance, arrival_depth,
                    sea_level, arrival_tol):
    for k in range(cells.shape[0]):
        _observe_point(q, aux, cells, bed_field, maxima, t, dry_tolerance, arrival_depth,
                       sea_level, arrival_tol, k)


def _maxima_row(row: int, doc: str) -> property:
    """A host view of one row of the maxima (read: copies the device maxima once after
    an update; write: moves the maxima to the host)."""

    def get(self):
        return self._host_maxima()[row]

    get.__doc__ = doc

    def put(self, value):
        m = np.array(self._host_maxima(), dtype=np.float64, copy=True)
        m[row] = value
        self._maxima, self._backend, self._host = m, None, None

    return property(get, put, doc=doc)


class FGMax:
    """Maxima at points ``(x, y)`` (arrays of one shape; a 2D ``meshgrid`` is a grid).

    ``topo_index``: aux field of the bed (``None``: flat bed at 0, e.g. for solvers
    without aux); ``dry_tolerance``: depths at or below it count as dry (speed 0, no
    surface).

    Coordinates: the points are in the simulation's coordinates; ``origin`` is where
    their ``(0, 0)`` lies in the map projection ``epsg`` (a run in local coordinates
    keeps rounding small), and ``crs`` says it in words.  :meth:`write` georeferences
    the rasters (``x + origin``, ``epsg``) and leaves ``.npz`` and ``.vtp`` in the
    simulation's coordinates, beside the frames, with the origin and ``crs`` stored."""

    timer_phase = "output"
    deferrable = True  # on_step: device work on the stream, reading the interior
    collective = True  # distributed: on every rank, each folding its own points

    def __init__(self, x, y, topo_index: int | None = 0, dry_tolerance: float = 1e-3,
                 sea_level: float = 0.0, arrival_tol: float = 1e-2,
                 arrival_depth: float | None = None, path=None, epsg: int | None = None,
                 origin: tuple[float, float] = (0.0, 0.0), crs: str | None = None):
        x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
        if x.size == 0:
            raise ValueError("FGMax needs at least one point")
        self.shape = x.shape
        self.x, self.y = x.ravel().copy(), y.ravel().copy()
        self.topo_index = topo_index
        self.dry_tolerance = float(dry_tolerance)
        self.sea_level = float(sea_level)
        self.arrival_tol = float(arrival_tol)
        self.arrival_depth = self.dry_tolerance if arrival_depth is None else arrival_depth
        self.path, self.epsg = path, epsg
        self.origin = (float(origin[0]), float(origin[1]))
        self.crs = crs
        self.reset()

    @classmethod
    def grid(cls, x0, x1, y0, y1, nx, ny, **kw) -> FGMax:
        X, Y = np.meshgrid(np.linspace(x0, x1, nx), np.linspace(y0, y1, ny))
        return cls(X, Y, **kw)

    max_depth = _maxima_row(0, "Maximum depth at each point (flat, host array).")
    max_speed = _maxima_row(1, "Maximum speed over the wet samples (0 when never wet).")
    max_surface = _maxima_row(2, "Maximum surface elevation over the wet samples "
                                 "(-inf when never wet).")
    arrival_time = _maxima_row(3, "First arrival time (NaN: never).")
    bed = _maxima_row(4, "Bed elevation of the last sample.")

    def reset(self):
        n = self.x.size
        self._maxima = np.stack([np.zeros(n), np.zeros(n), np.full(n, -np.inf),
                                 np.full(n, np.nan), np.full(n, np.nan)])
        # the backend whose device holds _maxima (None: the host), and the host copy of
        # device maxima made since the last update (None: none)
        self._backend = self._host = None
        self._comm = None  # the communicator of a distributed run (set by update)
        if not hasattr(self, "_cells"):
            self._cells = PointCells(self.x, self.y)

    def _host_maxima(self) -> np.ndarray:
        if self._backend is None or not self._backend.is_gpu:
            return self._maxima
        if self._host is None:
            # a copy: in the CUDA simulator to_host returns the device array itself
            self._host = np.array(self._backend.to_host(self._maxima), copy=True)
        return self._host

    def _maxima_on(self, backend):
        """The maxima on ``backend`` (moved there once, when the backend changes)."""
        if self._backend is not backend:
            host = self._host_maxima()
            self._maxima = backend.to_device(host) if backend.is_gpu else host
            self._backend = backend
        self._host = None
        return self._maxima

    # ---- callback protocol
    def on_start(self, sim):
        self.update(sim)

    def on_step(self, sim):
        self.update(sim)

    def on_end(self, sim):
        self.flush()
        if self.path is not None and (self._comm is None or self._comm.rank == 0):
            self.write(self.path)
        if self._comm is not None:
            self._comm.Barrier()  # the files exist on return, on every rank

    def flush(self):
        """Merge the maxima of the ranks of a distributed run, on every rank (see the
        module docstring; collective); nothing to do on one rank."""
        comm = self._comm
        if comm is None:
            return
        mine = np.ascontiguousarray(self._host_maxima(), dtype=np.float64)
        every = np.empty((comm.size,) + mine.shape)
        comm.Allgather(mine, every)
        merged = np.maximum.reduce(every[:, :3], axis=0)  # NaN kept, as np.maximum
        arrival = np.fmin.reduce(every[:, 3], axis=0)  # NaN: not arrived on that rank
        bed = every[self._cells.owner, 4, np.arange(mine.shape[1])]
        self._maxima = np.concatenate([merged, arrival[None], bed[None]])
        self._backend = self._host = None

    def update(self, sim):
        """Fold the state of ``sim`` now into the maxima, on its backend: one kernel
        launch on the GPU, no host transfer (the points are located again only when the
        forest changed)."""
        cells = self._cells
        cells.update(sim)
        comm = getattr(sim, "comm", None)
        self._comm = comm if comm is not None and comm.size > 1 else None
        be = sim.backend
        maxima = self._maxima_on(be)
        q = sim.q
        aux, bed = (q, -1) if self.topo_index is None else (sim.aux, int(self.topo_index))
        args = (q, aux, cells.cells, bed, maxima, float(sim.t), self.dry_tolerance,
                float(self.arrival_depth), self.sea_level, self.arrival_tol)
        if be.is_gpu:
            from forestpy.patches.launch import launch

            launch(_observe_point, len(cells.x), *args, backend=be)
        else:
            _observe_points(*args)

    def observe(self, t, h, hu, hv, b):
        """Fold one sample (host arrays over the points) into the maxima."""
        n = self.x.size
        q = np.ascontiguousarray(np.stack([h, hu, hv]).astype(np.float64).reshape(1, 3, 1, n))
        aux = np.ascontiguousarray(np.asarray(b, dtype=np.float64).reshape(1, 1, 1, n))
        cells = np.zeros((n, 3), dtype=np.int64)
        cells[:, 2] = np.arange(n)
        maxima = np.array(self._host_maxima(), copy=True)
        _observe_points(q, aux, cells, 0, maxima, float(t), self.dry_tolerance,
                        float(self.arrival_depth), self.sea_level, self.arrival_tol)
        self._maxima, self._backend, self._host = maxima, None, None

    # ---- results
    def results(self) -> dict:
        out = {k: getattr(self, k).reshape(self.shape) for k in FIELDS}
        out["max_surface"] = np.where(np.isinf(out["max_surface"]), np.nan, out["max_surface"])
        out.update(x=self.x.reshape(self.shape), y=self.y.reshape(self.shape),
                   bed=self.bed.reshape(self.shape))
        return out

    def write(self, path) -> list[Path]:
        """``path.npz`` with every field, ``path.vtp`` (the points and their maxima, for
        ParaView, when the ``vtk`` package is installed), and for a uniform 2D grid
        ``path_<field>.asc`` and ``.tif`` (NaN as NODATA).  Returns the files written."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        res = self.results()
        base = path.with_suffix("")
        files = [base.with_suffix(".npz")]
        np.savez(files[0], **res, origin=np.array(self.origin),
                 epsg=np.int64(-1 if self.epsg is None else self.epsg),
                 crs=np.str_(self.crs or ""))
        try:
            from forestpy.io.vtk import write_points

            meta = {"crs": self.crs} if self.crs else {}
            files.append(write_points(base.with_suffix(".vtp"), res["x"], res["y"],
                                      {k: res[k] for k in (*FIELDS, "bed")}, meta=meta))
        except ImportError:  # vtk is optional
            pass
        X, Y = res["x"], res["y"]
        if X.ndim == 2 and min(X.shape) >= 2:
            dx, dy = X[0, 1] - X[0, 0], Y[1, 0] - Y[0, 0]
            uniform = (np.allclose(np.diff(X, axis=1), dx) and np.allclose(np.diff(Y, axis=0), dy)
                       and dx > 0 and dy > 0)
            if uniform:
                for k in FIELDS:
                    r = Raster(res[k], X[0, 0] + self.origin[0], Y[0, 0] + self.origin[1],
                               dx, dy, "cell")
                    tif = Path(f"{base}_{k}.tif")
                    write_geotiff(tif, r, epsg=self.epsg)
                    files.append(tif)
                    if np.isclose(dx, dy, rtol=1e-12, atol=0):
                        asc = Path(f"{base}_{k}.asc")
                        write_esri_ascii(asc, r)
                        files.append(asc)
        return files

    def state_dict(self) -> dict:
        return {k: getattr(self, k).copy() for k in _ROWS} | {
            "x": self.x.copy(), "y": self.y.copy()}

    def load_state_dict(self, state: dict) -> None:
        if not (np.array_equal(state["x"], self.x) and np.array_equal(state["y"], self.y)):
            raise ValueError("FGMax points differ from the checkpoint's")
        for k in _ROWS:
            v = np.asarray(state[k], np.float64)
            if v.shape != self.x.shape:
                raise ValueError(f"FGMax {k}: shape {v.shape}, expected {self.x.shape}")
            setattr(self, k, v.copy())
