"""Seafloor deformation ("dtopo"): GeoClaw dtopotype 1 and 3, applied in time.

A :class:`DTopography` holds frames ``dz[k, j, i]`` at times ``t[k]`` on one uniform
grid (row 0 south).  The deformation at time ``t`` is linear in time between frames,
frame 0 before ``t[0]`` and the last frame after ``t[-1]`` (GeoClaw's rule); each frame
is cell-averaged exactly like the topography (bilinear interpolant, constant
extension beyond the edges of the grid), so the time interpolation commutes with the
averaging.  :func:`make_dtopo_b4step` returns a ``b4step(sim, dt)`` hook that sets
``aux[topo_index] = (bed from setaux) + dz(t)``: the water depth is unchanged, so the
surface moves with the seafloor, as in GeoClaw.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .rasters import Raster, RasterError, _grid_index, _numbers, _read_text, _table
from .topography import TopographyStack

__all__ = ["DTopography", "read_dtopo", "write_dtopo", "make_dtopo_b4step"]


class DTopography:
    """Frames ``dz (mt, my, mx)`` at times ``t (mt,)``, points ``(x0 + i dx, y0 + j dy)``."""

    def __init__(self, dz, t, x0, y0, dx, dy, name="dtopo"):
        self.dz = np.asarray(dz, np.float64)
        self.t = np.asarray(t, np.float64)
        if self.dz.ndim != 3 or self.dz.shape[0] != self.t.size:
            raise ValueError(f"{name}: dz must be (mt, my, mx) with mt = len(t)")
        if min(self.dz.shape[1:]) < 2:
            raise ValueError(f"{name}: a deformation grid needs at least 2x2 points")
        if np.any(np.diff(self.t) <= 0):
            raise ValueError(f"{name}: frame times must increase, got {self.t}")
        self.x0, self.y0, self.dx, self.dy, self.name = x0, y0, dx, dy, name
        self._stacks = [TopographyStack(Raster(f, x0, y0, dx, dy)) for f in self.dz]

    @property
    def extent(self):
        my, mx = self.dz.shape[1:]
        return (self.x0, self.x0 + (mx - 1) * self.dx, self.y0, self.y0 + (my - 1) * self.dy)

    def weights(self, t: float):
        """``(k, w)``: dz(t) = (1 - w) * frame k + w * frame k+1 (k+1 clipped)."""
        ts = self.t
        if t <= ts[0] or ts.size == 1:
            return 0, 0.0
        if t >= ts[-1]:
            return ts.size - 1, 0.0
        k = int(np.searchsorted(ts, t, side="right") - 1)
        return k, (t - ts[k]) / (ts[k + 1] - ts[k])

    def cell_averages(self, t, x, y, dx, dy):
        """Exact cell averages of dz(t) over cells centred at ``(x, y)``."""
        k, w = self.weights(t)
        x, y, dx, dy = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (x, y, dx, dy)))
        box = (x - 0.5 * dx, x + 0.5 * dx, y - 0.5 * dy, y + 0.5 * dy)
        out = self._stacks[k].cell_averages(*box)
        if w:
            out = (1.0 - w) * out + w * self._stacks[k + 1].cell_averages(*box)
        return out


def read_dtopo(path, dtopotype: int | None = None) -> DTopography:
    """Read GeoClaw dtopotype 1 (lines ``t x y dz``) or 3 (header + frames); a
    malformed file raises :class:`~.rasters.RasterError` naming it."""
    path = Path(path)
    if dtopotype is None:
        dtopotype = 1 if path.suffix.lower() == ".tt1" else 3
    if dtopotype not in (1, 3):
        raise RasterError(f"{path}: unknown dtopotype {dtopotype} (1 or 3)")
    text = _read_text(path)
    if dtopotype == 1:
        d = _table(path, text, 4, "dtopotype 1 needs lines 't x y dz'")
        if np.isnan(d[:, 3]).any():
            raise RasterError(f"{path}: dtopotype 1 has a NaN deformation")
        ts = np.unique(d[:, 0])
        xs, i = _grid_index(path, d[:, 1], "x")
        ys, j = _grid_index(path, d[:, 2], "y")
        k = np.searchsorted(ts, d[:, 0])
        flat = (k * ys.size + j) * xs.size + i
        if ts.size * xs.size * ys.size != len(d) or np.unique(flat).size != len(d):
            raise RasterError(f"{path}: dtopotype 1 points do not form full frames of a grid")
        dz = np.empty((ts.size, ys.size, xs.size))
        dz.flat[flat] = d[:, 3]
        dx, dy = (xs[-1] - xs[0]) / (xs.size - 1), (ys[-1] - ys[0]) / (ys.size - 1)
        return _dtopo(path, dz, ts, xs[0], ys[0], dx, dy)
    lines = text.splitlines()
    names = ("mx", "my", "mt", "xlower", "ylower", "t0", "dx", "dy", "dt")
    h = {}
    for k, name in enumerate(names):
        if k >= len(lines) or not lines[k].split():
            raise RasterError(f"{path}: header ends before {name} (line {k + 1})")
        try:
            h[name] = float(lines[k].split()[0])
        except ValueError:
            raise RasterError(
                f"{path}: header line {k + 1} {lines[k][:80]!r}: no {name}") from None
        if not math.isfinite(h[name]):
            raise RasterError(f"{path}: header {name}={h[name]} is not a finite number")
    if any(h[n] != int(h[n]) or h[n] < 1 for n in ("mx", "my", "mt")):
        raise RasterError(f"{path}: mx, my, mt must be positive integers, got "
                          f"{h['mx']}, {h['my']}, {h['mt']}")
    mx, my, mt = (int(h[n]) for n in ("mx", "my", "mt"))
    if not (h["dx"] > 0 and h["dy"] > 0 and (mt == 1 or h["dt"] > 0)):
        raise RasterError(f"{path}: dx, dy (and dt of several frames) must be positive, got "
                          f"{h['dx']}, {h['dy']}, {h['dt']}")
    vals = _numbers(path, " ".join(lines[9:]), mx * my * mt, "frames")
    if np.isnan(vals).any():
        raise RasterError(f"{path}: a deformation in the frames is NaN")
    dz = vals.reshape(mt, my, mx)[:, ::-1]
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: refused below
        t = h["t0"] + h["dt"] * np.arange(mt)
    if not np.isfinite(t).all():
        raise RasterError(f"{path}: frame times t0 + k dt overflow (t0={h['t0']}, "
                          f"dt={h['dt']}, mt={mt})")
    return _dtopo(path, np.ascontiguousarray(dz), t, h["xlower"], h["ylower"], h["dx"],
                  h["dy"])


def _dtopo(path, dz, t, x0, y0, dx, dy) -> DTopography:
    """A :class:`DTopography` of checked values; what it still refuses (fewer than 2x2
    points, frame times that do not increase) is reported as a bad file."""
    try:
        return DTopography(dz, t, float(x0), float(y0), float(dx), float(dy), str(path))
    except ValueError as e:
        raise RasterError(f"{path}: {' '.join(str(e).split())[:200]}") from None


def write_dtopo(path, d: DTopography, dtopotype: int = 3) -> None:
    """Write dtopotype 1 or 3 (type 3 needs equally spaced frame times)."""
    mt, my, mx = d.dz.shape
    if dtopotype == 1:
        X, Y = np.meshgrid(d.x0 + d.dx * np.arange(mx), d.y0 + d.dy * np.arange(my))
        rows = [np.column_stack([np.full(X.size, tk), X[::-1].ravel(), Y[::-1].ravel(),
                                 f[::-1].ravel()]) for tk, f in zip(d.t, d.dz)]
        np.savetxt(path, np.concatenate(rows), fmt="%.17g")
        return
    if dtopotype != 3:
        raise ValueError(f"dtopotype must be 1 or 3, got {dtopotype}")
    dt = float(d.t[1] - d.t[0]) if mt > 1 else 0.0
    if mt > 2 and np.ptp(np.diff(d.t)) > 1e-12 * max(abs(dt), 1.0):
        raise ValueError("dtopotype 3 needs equally spaced frame times; write type 1")
    head = "".join(f"{v!r:<24} {n}\n" for v, n in zip(
        (mx, my, mt, *(float(v) for v in (d.x0, d.y0, d.t[0], d.dx, d.dy, dt))),
        ("mx", "my", "mt", "xlower", "ylower", "t0", "dx", "dy", "dt")))
    body = "\n".join(" ".join(f"{v:.17g}" for v in row) for f in d.dz for row in f[::-1])
    Path(path).write_text(head + body + "\n")


def make_dtopo_b4step(dtopo: DTopography, topo_index: int = 0, then=None):
    """A ``b4step(sim, dt)`` adding dz(t) (cell-averaged) to the bed in ``sim.aux``.

    It recomputes while ``t`` is within the frames' time span (and once after it ends);
    ``then(sim, dt)`` is called afterwards (to chain another hook)."""
    state = {"key": None}

    def b4step(sim, dt):
        t = sim.t
        key = (id(sim.aux_setaux), min(max(t, dtopo.t[0]), dtopo.t[-1]))
        if key != state["key"]:
            x, y = sim.centers_host  # the rows of aux: every patch, or a rank's local ones
            g = sim.layout.local_geom
            dz = dtopo.cell_averages(t, x, y, g.dx[:, None, None], g.dy[:, None, None])
            be = sim.backend
            bed = sim.aux_setaux[:, topo_index]
            sim.aux[:, topo_index] = bed + be.to_device(dz, sim.dtype)
            state["key"] = key
        if then is not None:
            then(sim, dt)

    return b4step
