"""fgmax: maxima of the flow on a fixed grid of points, updated every step.

:class:`FGMax` is a callback (``on_start/on_step/on_end(sim)``) that samples, after
every accepted step, the finest leaf containing each point (``sim.sample``, batched
over all points) and keeps the maximum depth, maximum speed, maximum surface elevation
(over wet samples) and the first arrival time: the first sampled time at which the
depth exceeds ``arrival_depth`` and the surface departs from ``sea_level`` by more than
``arrival_tol`` (NaN: never).  ``state_dict/load_state_dict`` make it checkpointable.
:meth:`write` saves ``.npz`` and, for a grid, ESRI ASCII and GeoTIFF files per field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .rasters import Raster, write_esri_ascii, write_geotiff

__all__ = ["FGMax"]

FIELDS = ("max_depth", "max_speed", "max_surface", "arrival_time")


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

    def reset(self):
        n = self.x.size
        self.max_depth = np.zeros(n)
        self.max_speed = np.zeros(n)
        self.max_surface = np.full(n, -np.inf)
        self.arrival_time = np.full(n, np.nan)
        self.bed = np.full(n, np.nan)

    # ---- callback protocol
    def on_start(self, sim):
        self.update(sim)

    def on_step(self, sim):
        self.update(sim)

    def on_end(self, sim):
        if self.path is not None:
            self.write(self.path)

    def update(self, sim):
        if self.topo_index is None:
            q = sim.sample(self.x, self.y)
            b = np.zeros(len(q))
        else:
            q, aux = sim.sample(self.x, self.y, aux=True)
            b = aux[:, self.topo_index]
        self.observe(sim.t, q[:, 0], q[:, 1], q[:, 2], b)

    def observe(self, t, h, hu, hv, b):
        """Fold one sample (arrays over the points) into the maxima."""
        wet = h > self.dry_tolerance
        speed = np.where(wet, np.sqrt(hu * hu + hv * hv) / np.where(wet, h, 1.0), 0.0)
        eta = h + b
        np.maximum(self.max_depth, h, out=self.max_depth)
        np.maximum(self.max_speed, speed, out=self.max_speed)
        self.max_surface = np.where(wet, np.maximum(self.max_surface, eta), self.max_surface)
        arrived = (h > self.arrival_depth) & (np.abs(eta - self.sea_level) > self.arrival_tol)
        self.arrival_time = np.where(np.isnan(self.arrival_time) & arrived, t, self.arrival_time)
        self.bed = b.copy()

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
        return {k: getattr(self, k).copy() for k in FIELDS + ("bed",)} | {
            "x": self.x.copy(), "y": self.y.copy()}

    def load_state_dict(self, state: dict) -> None:
        if not (np.array_equal(state["x"], self.x) and np.array_equal(state["y"], self.y)):
            raise ValueError("FGMax points differ from the checkpoint's")
        for k in FIELDS + ("bed",):
            v = np.asarray(state[k], np.float64)
            if v.shape != self.x.shape:
                raise ValueError(f"FGMax {k}: shape {v.shape}, expected {self.x.shape}")
            setattr(self, k, v.copy())
