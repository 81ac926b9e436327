"""Fixed points in a changing forest: their cells, located once per forest, and a
device buffer of the samples taken there.

Gauges and fgmax read the state at the same points after every step.  Searching the
forest for them is host work and uploading the result is a transfer, so
:class:`PointCells` does both only when the forest (or this rank's share of it)
changes, and keeps the answer on the backend: the cell of each point as
``(row, j, i)`` and, per array shape asked for, the flat positions of chosen
components, so that one ``take`` gathers a whole sample (on a GPU one kernel,
:func:`gather_sample`, gathers the components of ``q`` and of ``aux`` together into
the row: a launch, not two ``take`` calls and their views).  :class:`SampleRows` holds the
samples of many steps on the device (grown by doubling up to a cap) until the caller
copies them to the host in one transfer, at output times.

The cell of a point is the one :meth:`forestpy.Simulation.sample` reads: the finest
leaf containing the point, the cell containing it in that leaf (nearest cell, no
interpolation).  In a distributed run a rank holds only the cells of its own patches:
the other points have row ``-1`` (and flat position 0, a valid placeholder whose value
the caller discards); ``owner`` says which rank holds each point.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["PointCells", "SampleRows", "gather_sample"]


@numba.njit(inline="always")
def _gather_entry(q, aux, entries, data, row, k):
    """``data[row, k]`` = entry ``k`` of a sample: ``entries[k] = (array, patch,
    component, j, i)`` with array 0 for ``q``, 1 for ``aux``."""
    p, c, j, i = entries[k, 1], entries[k, 2], entries[k, 3], entries[k, 4]
    if entries[k, 0] == 0:
        data[row, k] = q[p, c, j, i]
    else:
        data[row, k] = aux[p, c, j, i]


def gather_sample(q, aux, entries, rows, backend) -> None:
    """Fill the next row of ``rows`` (:class:`SampleRows`) with the state at the
    ``entries`` (:meth:`PointCells.entries`) in one kernel launch (GPU backend)."""
    from forestpy.patches.launch import launch

    row = rows.next_index()
    launch(_gather_entry, entries.shape[0], q, q if aux is None else aux, entries,
           rows.data, row, backend=backend)


class PointCells:
    """The cells of the points ``(x, y)`` in a simulation's local arrays.

    :meth:`update` locates the points again when the simulation's forest, geometry,
    layout span or backend differ from those of the last location, and does nothing
    otherwise (no host search, no upload); ``epoch`` counts the locations.  After it:
    ``rows``, ``j``, ``i`` (host int64 arrays; ``rows`` is ``-1`` where another rank
    holds the point), ``owner`` (host: the rank holding each point), ``cells`` (backend
    int64 array ``(npoints, 3)`` of ``(row, j, i)``) and :meth:`flat_index`.
    """

    def __init__(self, x, y):
        self.x = np.ascontiguousarray(x, dtype=np.float64).ravel()
        self.y = np.ascontiguousarray(y, dtype=np.float64).ravel()
        if self.x.shape != self.y.shape:
            raise ValueError(f"x and y differ in size: {self.x.size} and {self.y.size}")
        self.epoch = 0
        self._key: tuple | None = None
        self._flat: dict = {}

    def update(self, sim) -> bool:
        """Locate the points in ``sim``'s local arrays if its forest or layout changed
        since the last call; returns whether they were located again.  Raises
        ``ValueError`` for a point outside the domain.  Not collective."""
        sim._localize()
        L = sim.layout
        key = (sim.forest, sim.geom, sim.backend, int(L.lo), int(L.hi), bool(L.whole))
        if self._key is not None and all(
                a is b if k < 3 else a == b for k, (a, b) in enumerate(zip(key, self._key))):
            return False
        leaf, j, i = sim._locate(self.x, self.y)
        if L.whole:
            rows, owner = leaf, np.zeros(len(leaf), dtype=np.int64)
        else:
            mine = (leaf >= L.lo) & (leaf < L.hi)
            rows = np.where(mine, leaf - L.lo, -1)
            owner = np.searchsorted(L.offsets, leaf, side="right") - 1
        self.rows, self.j, self.i = rows.astype(np.int64), j.astype(np.int64), i.astype(np.int64)
        self.owner = owner.astype(np.int64)
        self.cells = sim.backend.to_device(np.stack([self.rows, self.j, self.i], axis=1))
        self._backend = sim.backend
        self._flat = {}
        self._key = key
        self.epoch += 1
        return True

    def entries(self, q_components, aux_components):
        """Backend int64 array ``(n, 5)`` of :func:`gather_sample`'s entries: every
        point's ``q_components`` (in point-major order, as :meth:`flat_index`), then
        every point's ``aux_components``; points of other ranks read cell
        ``(0, c, 0, 0)``.  Made once per location and components."""
        key = ("entries", tuple(int(c) for c in q_components),
               tuple(int(c) for c in aux_components))
        got = self._flat.get(key)
        if got is None:
            parts = []
            for which, comps in enumerate(key[1:]):
                comp = np.asarray(comps, dtype=np.int64)
                n, m = len(self.rows), len(comp)
                e = np.zeros((n, m, 5), dtype=np.int64)
                e[..., 0] = which
                here = self.rows >= 0
                e[..., 1] = np.where(here, self.rows, 0)[:, None]
                e[..., 2] = comp[None, :]
                e[..., 3] = np.where(here, self.j, 0)[:, None]
                e[..., 4] = np.where(here, self.i, 0)[:, None]
                parts.append(e.reshape(-1, 5))
            got = self._flat[key] = self._backend.to_device(
                np.ascontiguousarray(np.concatenate(parts)))
        return got

    def flat_index(self, shape, components):
        """Backend int64 array ``(npoints, len(components))``: the position of component
        ``c`` at each point's cell in a C-ordered array of ``shape`` ``(rows,
        components, NY, NX)`` flattened (0 for points of other ranks); made once per
        location and shape."""
        key = (tuple(int(s) for s in shape), tuple(int(c) for c in components))
        flat = self._flat.get(key)
        if flat is None:
            _, ncomp, ny, nx = key[0]
            comp = np.asarray(key[1], dtype=np.int64)
            host = ((self.rows[:, None] * ncomp + comp[None, :]) * ny
                    + self.j[:, None]) * nx + self.i[:, None]
            host[self.rows < 0] = 0
            flat = self._flat[key] = self._backend.to_device(host)
        return flat


class SampleRows:
    """Rows of ``width`` values appended on the backend, copied to the host together.

    :meth:`next_row` returns the backend view of a new row (the caller fills it, with
    ``xp.take(..., out=row[a:b])``); the buffer starts at ``capacity`` rows and doubles
    (a device copy) up to ``max_rows``; :attr:`full` says that the caller must
    :meth:`take` the rows before the next one.  :meth:`take` returns the rows as one
    host array (one :meth:`~forestpy.backend.Backend.to_host`) and empties the buffer.
    """

    def __init__(self, backend, width: int, dtype, capacity: int = 64, max_rows: int = 4096):
        self.backend, self.width, self.dtype = backend, int(width), np.dtype(dtype)
        self.max_rows = int(max_rows)
        self._data = backend.xp.empty((min(int(capacity), self.max_rows), self.width),
                                      dtype=self.dtype)
        self.n = 0

    @property
    def full(self) -> bool:
        return self.n >= self.max_rows

    def next_row(self):
        """The backend view of the next row (grows the buffer when it is at capacity)."""
        if self.full:
            raise RuntimeError("SampleRows is full: take() the rows first")
        if self.n == len(self._data):
            grown = self.backend.xp.empty((min(2 * self.n, self.max_rows), self.width),
                                          dtype=self.dtype)
            grown[: self.n] = self._data
            self._data = grown
        row = self._data[self.n]
        self.n += 1
        return row

    @property
    def data(self):
        """The backend buffer (its first :attr:`n` rows filled)."""
        return self._data

    def next_index(self) -> int:
        """The index of the next row in :attr:`data` (grown as :meth:`next_row`)."""
        self.next_row()
        return self.n - 1

    def take(self) -> np.ndarray:
        """The rows appended since the last call, as a host array ``(n, width)`` (a
        copy: the buffer is reused), and an empty buffer."""
        if self.n == 0:
            return np.empty((0, self.width), dtype=self.dtype)
        out = np.array(self.backend.to_host(self._data[: self.n]), copy=True)
        self.n = 0
        return out
