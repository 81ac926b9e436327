"""Topography: gridded bed elevation, several overlapping files, exact cell averages.

Each :class:`Topography` defines a function ``B(x, y)``: the bilinear interpolant of its
values (constant extension beyond its edges).  A :class:`TopographyStack` combines
several with GeoClaw's rule: at each point the finest file covering it counts (ties:
the later file).  :func:`cell_averages` integrates that piecewise-bilinear function
exactly over every cell of every patch (a rectangle is split by the precedence
regions, and within one file the integral is ``sum z_ij * Wx_i * Wy_j`` with ``W`` the
exact integrals of the 1D hat functions), so the average over a coarse cell equals
the mean of its four children to round-off: refinement and coarsening keep a lake at
rest at rest.  :func:`make_setaux` wraps it with the ``Simulation`` ``setaux``
signature.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from .rasters import Raster, RasterError, read_raster

__all__ = ["Topography", "TopographyStack", "cell_averages", "make_setaux", "TopographyError"]


class TopographyError(ValueError):
    """Topography that cannot describe the domain (coverage, NODATA holes)."""


class Topography:
    """One gridded topography: values ``z[j, i]`` at ``(x0 + i dx, y0 + j dy)``.

    ``extent`` is ``(xmin, xmax, ymin, ymax)`` of the points (where the bilinear
    interpolant is defined; GeoClaw's convention), ``resolution`` is ``(dx, dy)``.
    Build from a :class:`Raster`, or with :meth:`read` from a file.
    """

    def __init__(self, raster: Raster, name: str = "topography"):
        self.raster = raster
        self.name = name
        if min(raster.z.shape) < 2:
            raise TopographyError(f"{name}: a topography needs at least 2x2 values")

    @classmethod
    def read(cls, path, topotype: int | None = None) -> Topography:
        raster = read_raster(path, topotype)
        if min(raster.z.shape) < 2:  # a bad file, not a bad call
            raise RasterError(f"{path}: a topography needs at least 2x2 values, the file "
                              f"holds {raster.z.shape[0]} x {raster.z.shape[1]}")
        return cls(raster, name=str(path))

    @classmethod
    def from_function(cls, f, x0, x1, y0, y1, nx, ny, name="function") -> Topography:
        x, y = np.linspace(x0, x1, nx), np.linspace(y0, y1, ny)
        X, Y = np.meshgrid(x, y)
        return cls(Raster(f(X, Y), x0, y0, x[1] - x[0], y[1] - y[0], "node"), name)

    z = property(lambda self: self.raster.z)
    x = property(lambda self: self.raster.x)
    y = property(lambda self: self.raster.y)

    @property
    def resolution(self) -> tuple[float, float]:
        return self.raster.dx, self.raster.dy

    @property
    def extent(self) -> tuple[float, float, float, float]:
        r = self.raster
        ny, nx = r.z.shape
        return (r.x0, r.x0 + (nx - 1) * r.dx, r.y0, r.y0 + (ny - 1) * r.dy)

    @property
    def coverage(self) -> tuple[float, float, float, float]:
        """Where this file takes precedence: the extent of its points, for a
        cell-registered file (ESRI ASCII, GeoTIFF PixelIsArea) grown by half a cell to
        the cells' edges (the half cell beyond the outer values is constant)."""
        x0, x1, y0, y1 = self.extent
        if self.raster.registration == "cell":
            hx, hy = 0.5 * self.raster.dx, 0.5 * self.raster.dy
            return (x0 - hx, x1 + hx, y0 - hy, y1 + hy)
        return (x0, x1, y0, y1)

    def __call__(self, x, y):
        """The bilinear interpolant at points (constant beyond the edges)."""
        r = self.raster
        ny, nx = r.z.shape
        u = np.clip((np.asarray(x, float) - r.x0) / r.dx, 0, nx - 1)
        v = np.clip((np.asarray(y, float) - r.y0) / r.dy, 0, ny - 1)
        i = np.minimum(u.astype(int), nx - 2)
        j = np.minimum(v.astype(int), ny - 2)
        a, b = u - i, v - j
        z = r.z
        return ((1 - a) * (1 - b) * z[j, i] + a * (1 - b) * z[j, i + 1]
                + (1 - a) * b * z[j + 1, i] + a * b * z[j + 1, i + 1])

    def crop(self, x0, x1, y0, y1) -> Topography:
        """The sub-grid covering ``[x0, x1] x [y0, y1]`` (whole points, one beyond)."""
        r = self.raster
        ny, nx = r.z.shape
        i0 = max(int(np.floor((x0 - r.x0) / r.dx)), 0)
        i1 = min(int(np.ceil((x1 - r.x0) / r.dx)), nx - 1)
        j0 = max(int(np.floor((y0 - r.y0) / r.dy)), 0)
        j1 = min(int(np.ceil((y1 - r.y0) / r.dy)), ny - 1)
        sub = Raster(r.z[j0:j1 + 1, i0:i1 + 1].copy(), r.x0 + i0 * r.dx, r.y0 + j0 * r.dy,
                     r.dx, r.dy, r.registration, r.nodata, dict(r.meta))
        return Topography(sub, self.name)


class TopographyStack:
    """Several overlapping topographies; the finest covering a point takes precedence.

    Order: by cell area ``dx*dy`` (finest first); equal areas: the later file first.
    A file takes precedence inside :attr:`Topography.coverage` (its points' extent;
    for cell-registered files grown by half a cell).
    Beyond every file the coarsest one is extended by constants (for ghost cells);
    :meth:`check_covers` raises when a domain is not covered.
    """

    def __init__(self, topos):
        if isinstance(topos, (Topography, Raster, str, Path)):
            topos = [topos]
        items = []
        for t in topos:
            if isinstance(t, (str, Path)):
                t = Topography.read(t)
            elif isinstance(t, Raster):
                t = Topography(t)
            items.append(t)
        if not items:
            raise TopographyError("TopographyStack needs at least one topography")
        order = sorted(range(len(items)), key=lambda k: (items[k].resolution[0]
                                                         * items[k].resolution[1], -k))
        self.topos = [items[k] for k in order]
        self._pack()

    def _pack(self):
        sizes = [t.z.size for t in self.topos]
        self._z = np.concatenate([t.z.ravel() for t in self.topos])
        self._start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self._grid = np.array([[t.raster.x0, t.raster.y0, t.raster.dx, t.raster.dy,
                                t.z.shape[1], t.z.shape[0], *t.coverage] for t in self.topos],
                              np.float64)

    def check_covers(self, x0, x1, y0, y1) -> None:
        """Raise :class:`TopographyError` if the union of the files leaves part of the
        rectangle uncovered, or a NODATA value of a file lies where it takes precedence."""
        rects = [(x0, x1, y0, y1)]
        for t in self.topos:
            ex0, ex1, ey0, ey1 = t.coverage
            rest = []
            for a, b, c, d in rects:
                ia, ib, ic, id_ = max(a, ex0), min(b, ex1), max(c, ey0), min(d, ey1)
                if ia < ib and ic < id_:
                    nan = np.isnan(t.crop(ia, ib, ic, id_).z)
                    if nan.any():
                        sub = t.crop(ia, ib, ic, id_)
                        jj, ii = np.argwhere(nan)[0]
                        raise TopographyError(
                            f"{t.name}: NODATA value at ({sub.x[ii]:.10g}, {sub.y[jj]:.10g}) "
                            f"inside the domain [{x0}, {x1}] x [{y0}, {y1}] "
                            f"({int(nan.sum())} NODATA points there); fill or crop it")
                    rest += _subtract((a, b, c, d), (ia, ib, ic, id_))
                else:
                    rest.append((a, b, c, d))
            rects = [r for r in rest if r[1] - r[0] > 1e-12 * (abs(r[0]) + abs(r[1]) + 1)
                     and r[3] - r[2] > 1e-12 * (abs(r[2]) + abs(r[3]) + 1)]
        if rects:
            a, b, c, d = rects[0]
            names = ", ".join(f"{t.name} {t.coverage}" for t in self.topos)
            raise TopographyError(
                f"topography does not cover the domain [{x0}, {x1}] x [{y0}, {y1}]: "
                f"[{a:.10g}, {b:.10g}] x [{c:.10g}, {d:.10g}] is outside every file ({names})")

    def __call__(self, x, y):
        """The precedence-combined function at points."""
        x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
        out = self.topos[-1](x, y)
        done = np.zeros(x.shape, bool)
        for t in self.topos:
            ex0, ex1, ey0, ey1 = t.coverage
            inside = ~done & (x >= ex0) & (x <= ex1) & (y >= ey0) & (y <= ey1)
            out = np.where(inside, t(x, y), out)
            done |= inside
        return out

    def cell_averages(self, xlo, xhi, ylo, yhi) -> np.ndarray:
        """Exact averages over the rectangles ``[xlo, xhi] x [ylo, yhi]`` (any shape)."""
        shape = np.broadcast_shapes(*(np.shape(a) for a in (xlo, xhi, ylo, yhi)))
        xlo, xhi, ylo, yhi = (np.array(np.broadcast_to(np.asarray(a, np.float64), shape)).ravel()
                              for a in (xlo, xhi, ylo, yhi))
        out = np.empty(xlo.size)
        _averages(xlo, xhi, ylo, yhi, self._z, self._start, self._grid, out)
        return out.reshape(shape)


def _subtract(r, s):
    """Rectangle ``r`` minus its sub-rectangle ``s``: up to four pieces."""
    a, b, c, d = r
    ia, ib, ic, id_ = s
    out = []
    if ia > a:
        out.append((a, ia, c, d))
    if ib < b:
        out.append((ib, b, c, d))
    if ic > c:
        out.append((ia, ib, c, ic))
    if id_ < d:
        out.append((ia, ib, id_, d))
    return out


@numba.njit(cache=True, inline="always")
def _hat_integral(i, n, lo, hi):  # pragma: no cover - compiled
    """Integral over ``[lo, hi]`` (grid units) of hat ``i`` of ``n`` nodes at 0..n-1,
    the end hats extended by 1 beyond the grid (constant extension)."""
    s = 0.0
    # rising part on [i-1, i] (or constant 1 on (-inf, 0] for i == 0)
    if i == 0:
        a, b = lo, min(hi, 0.0)
        if b > a:
            s += b - a
    else:
        a, b = max(lo, i - 1.0), min(hi, float(i))
        if b > a:
            s += 0.5 * ((b - i + 1.0) ** 2 - (a - i + 1.0) ** 2)
    if i == n - 1:
        a, b = max(lo, float(i)), hi
        if b > a:
            s += b - a
    else:
        a, b = max(lo, float(i)), min(hi, i + 1.0)
        if b > a:
            s += 0.5 * ((i + 1.0 - a) ** 2 - (i + 1.0 - b) ** 2)
    return s


@numba.njit(cache=True)
def _integral_one(z, start, nx, ny, a, b, c, d, wx):  # pragma: no cover - compiled
    """Integral (grid units) of one file's extended bilinear interpolant over [a,b]x[c,d]."""
    i0 = max(int(np.floor(a)), 0)
    i1 = min(int(np.floor(b)) + 1, nx - 1)
    j0 = max(int(np.floor(c)), 0)
    j1 = min(int(np.floor(d)) + 1, ny - 1)
    i0 = min(i0, nx - 1)
    j0 = min(j0, ny - 1)
    i1 = max(i1, i0)
    j1 = max(j1, j0)
    for i in range(i0, i1 + 1):
        wx[i - i0] = _hat_integral(i, nx, a, b)
    total = 0.0
    for j in range(j0, j1 + 1):
        wy = _hat_integral(j, ny, c, d)
        if wy == 0.0:
            continue
        row = 0.0
        base = start + j * nx
        for i in range(i0, i1 + 1):
            row += z[base + i] * wx[i - i0]
        total += row * wy
    return total


@numba.njit(cache=True)
def _averages(xlo, xhi, ylo, yhi, z, starts, grid, out):  # pragma: no cover - compiled
    nt = grid.shape[0]
    stack = np.empty((4 * nt + 4, 5))
    wx = np.empty(int(grid[:, 4].max()) + 2)
    for k in range(xlo.size):
        area = (xhi[k] - xlo[k]) * (yhi[k] - ylo[k])
        n = 1
        stack[0, 0] = xlo[k]
        stack[0, 1] = xhi[k]
        stack[0, 2] = ylo[k]
        stack[0, 3] = yhi[k]
        stack[0, 4] = 0
        total = 0.0
        while n > 0:
            n -= 1
            a, b, c, d, t = stack[n, 0], stack[n, 1], stack[n, 2], stack[n, 3], int(stack[n, 4])
            x0, y0, dx, dy = grid[t, 0], grid[t, 1], grid[t, 2], grid[t, 3]
            nx, ny = int(grid[t, 4]), int(grid[t, 5])
            if t == nt - 1:  # the last (coarsest) file takes everything left, extended
                ia, ib, ic, id_ = a, b, c, d
            else:
                ia = max(a, grid[t, 6])
                ib = min(b, grid[t, 7])
                ic = max(c, grid[t, 8])
                id_ = min(d, grid[t, 9])
                if not (ia < ib and ic < id_):
                    stack[n, 4] = t + 1
                    n += 1
                    continue
            total += dx * dy * _integral_one(z, starts[t], nx, ny, (ia - x0) / dx,
                                             (ib - x0) / dx, (ic - y0) / dy, (id_ - y0) / dy, wx)
            if t < nt - 1:
                # the rest of [a,b]x[c,d] goes to the next file
                if ia > a:
                    stack[n, 0], stack[n, 1], stack[n, 2], stack[n, 3] = a, ia, c, d
                    stack[n, 4] = t + 1
                    n += 1
                if ib < b:
                    stack[n, 0], stack[n, 1], stack[n, 2], stack[n, 3] = ib, b, c, d
                    stack[n, 4] = t + 1
                    n += 1
                if ic > c:
                    stack[n, 0], stack[n, 1], stack[n, 2], stack[n, 3] = ia, ib, c, ic
                    stack[n, 4] = t + 1
                    n += 1
                if id_ < d:
                    stack[n, 0], stack[n, 1], stack[n, 2], stack[n, 3] = ia, ib, id_, d
                    stack[n, 4] = t + 1
                    n += 1
        out[k] = total / area


def cell_averages(topo, x, y, dx, dy) -> np.ndarray:
    """Exact averages of the topography over cells centred at ``(x, y)`` of size
    ``dx x dy`` (arrays broadcast together; ``topo`` a Topography, stack or list)."""
    stack = topo if isinstance(topo, TopographyStack) else TopographyStack(topo)
    x, y, dx, dy = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (x, y, dx, dy)))
    return stack.cell_averages(x - 0.5 * dx, x + 0.5 * dx, y - 0.5 * dy, y + 0.5 * dy)


def make_setaux(topo, num_aux: int = 1, topo_index: int = 0, domain=None, extra=None):
    """A ``setaux(x, y, dx, dy) -> aux`` for ``Simulation`` filling the bed elevation.

    ``aux[topo_index]`` holds exact cell averages of the topography; other aux fields
    are zero, or filled by ``extra(x, y, dx, dy, aux)`` (e.g. a Manning raster).
    ``domain``: ``(x0, x1, y0, y1)`` checked once for coverage and NODATA holes."""
    stack = topo if isinstance(topo, TopographyStack) else TopographyStack(topo)
    if domain is not None:
        stack.check_covers(*domain)

    def setaux(x, y, dx, dy):
        x = np.asarray(x, np.float64)
        aux = np.zeros((num_aux,) + x.shape)
        aux[topo_index] = cell_averages(stack, x, y, dx, dy)
        if extra is not None:
            extra(x, y, dx, dy, aux)
        return aux

    setaux.topography = stack
    return setaux


__all__ += ["RasterError"]
