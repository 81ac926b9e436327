"""Gauges of the two-layer solver on triangles: time series of each layer's depth and
velocity, the interface and the free surface at fixed points.

    sim = TwoLayerSolver(mesh, ...)
    gauges = sim.add_gauges([(0.0, 0.0), (2.5, 0.0)])   # or {"G1": (x, y), ...}
    sim.run(0.1)
    gauges.write("out/gauges.csv")                      # forestpy.callbacks.read_gauges

Each point is located once, in the triangle that contains it (the lowest-numbered one
when it lies on an edge or a node shared by several); a point outside the mesh is a
``ValueError`` naming the gauge.  The state of those cells is sampled at
:meth:`TwoLayerSolver.add_gauges` and after every step, into a buffer: a NumPy array
on the CPU, a device array on the GPU, written by a kernel launched after each step's
update (inside the CUDA graph: the row is the device's step count), so the GPU path
makes no host copy per step; the buffer comes to the host when it is read
(:meth:`TriangleGauges.samples`, :meth:`~TriangleGauges.write`).

Across MPI ranks (:class:`~forestpy.solvers.tworoe.distributed.DistributedSolver`) each
gauge is sampled by the rank that owns its cell; :meth:`~TriangleGauges.write` is then
collective and rank 0 writes the file.

The file is the CSV of :class:`forestpy.callbacks.Gauges` (header ``t, gauge, x, y``
and one column per field, one row per sample and gauge), fields :data:`FIELDS`
(``x, y`` are the requested points; the values are those of the containing cell, in
FP64: velocities are discharge / depth).
"""

from __future__ import annotations

import numpy as np

from forestpy.callbacks import gauge_ids

__all__ = ["FIELDS", "TriangleGauges", "locate_points"]

#: the columns of a gauge file after ``t, gauge, x, y``
FIELDS = ("h1", "h2", "u1x", "u1y", "u2x", "u2y", "interface", "surface")


def locate_points(mesh, xy) -> np.ndarray:
    """The cell containing each point ``xy (n, 2)`` (the lowest index where several
    share it: a point on an edge or a node); ``ValueError`` for a point outside the
    mesh.  A loop over the points, each vectorised over the cells (done once)."""
    xy = np.asarray(xy, dtype=np.float64)
    p = mesh.nodes[mesh.tris]  # (cells, 3, 2), counter-clockwise
    area2 = 2.0 * mesh.area
    out = np.empty(len(xy), dtype=np.int64)
    for i, (x, y) in enumerate(xy):
        inside = np.ones(mesh.num_cells, dtype=bool)
        for k in range(3):
            a, b = p[:, k], p[:, (k + 1) % 3]
            # twice the area of (a, b, point): >= 0 on the inner side of edge a -> b
            inside &= ((b[:, 0] - a[:, 0]) * (y - a[:, 1])
                       - (b[:, 1] - a[:, 1]) * (x - a[:, 0])) >= -1e-12 * area2
        hit = np.flatnonzero(inside)
        if len(hit) == 0:
            lo, hi = mesh.nodes.min(axis=0), mesh.nodes.max(axis=0)
            raise ValueError(f"gauge point {i} at ({x:g}, {y:g}) is outside the mesh "
                             f"(no triangle contains it; the nodes span x in "
                             f"[{lo[0]:g}, {hi[0]:g}], y in [{lo[1]:g}, {hi[1]:g}])")
        out[i] = hit[0]
    return out


def _points(points):
    ids, xy = gauge_ids(points)
    xy = np.asarray(xy, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1:] != (2,) or len(xy) == 0 or not np.isfinite(xy).all():
        raise ValueError(f"gauge points: expected a non-empty list of finite (x, y), got "
                         f"shape {xy.shape}")
    return ids, xy


class TriangleGauges:
    """The gauges of one solver (made by ``sim.add_gauges``; see the module).

    ``cells``: the global cell of each gauge; ``owned``: the gauges this rank samples
    (all of them on one rank); ``local``: their cells in the solver's local order."""

    CAPACITY = 64  # rows of the first buffer (it doubles when full)

    def __init__(self, sim, points):
        self.ids, xy = _points(points)
        self.x, self.y = xy[:, 0].copy(), xy[:, 1].copy()
        mesh = sim.mesh
        self.cells = locate_points(mesh, xy)
        self.comm = getattr(sim, "comm", None)
        lay = getattr(sim, "layout", None)
        if lay is None:
            self.owned = np.arange(len(self.cells))
            self.local = self.cells.copy()
        else:
            pos = np.full(mesh.num_cells, -1, dtype=np.int64)
            pos[lay.cells[:lay.n_owned]] = np.arange(lay.n_owned)
            self.owned = np.flatnonzero(pos[self.cells] >= 0)
            self.local = pos[self.cells[self.owned]]
        self.local = self.local.astype(np.int32)
        self.H = np.asarray(sim._H_global if lay is not None else sim.H,
                            dtype=np.float64)[self.cells]
        self.dtype = sim.dtype
        self.base = sim.steps  # row k: the state after step base + k (row 0: now)
        self._times = np.empty(self.CAPACITY)
        self._values = np.empty((self.CAPACITY, 6, len(self.owned)), dtype=self.dtype)
        self.rows = 0
        self._dev = None  # (values, times) on the GPU, rows filled: _dev_rows
        self._dev_rows = 0
        self.record(sim.W, sim.t)

    # --- sampling ---------------------------------------------------------------------

    def _grow(self, rows: int):
        cap = len(self._times)
        if rows > cap:
            cap = max(rows, 2 * cap)
            t, v = self._times, self._values
            self._times = np.empty(cap)
            self._values = np.empty((cap, *v.shape[1:]), dtype=v.dtype)
            self._times[:self.rows] = t[:self.rows]
            self._values[:self.rows] = v[:self.rows]

    def record(self, W, t: float):
        """Sample the host state ``W`` (the solver's local order) at time ``t``."""
        self._grow(self.rows + 1)
        self._times[self.rows] = t
        self._values[self.rows] = W[:, self.local]
        self.rows += 1

    def device_buffers(self, rows: int):
        """The device buffers ``(values (cap, 6, owned), times (cap,))`` with room for
        ``rows`` samples in all (the host's samples copied in when they are made or
        grown); returns ``(values, times, grown)``: ``grown`` says that the arrays are
        new (a captured CUDA graph holding the old ones must be captured again)."""
        from numba import cuda

        grown = False
        if self._dev is None or self._dev[1].shape[0] < rows:
            self.flush()
            self._grow(rows)
            self._dev = (cuda.to_device(self._values), cuda.to_device(self._times))
            self._dev_rows = self.rows
            grown = True
        return (*self._dev, grown)

    def device_rows(self, rows: int):
        """The GPU path says how many rows its buffer holds now (no copy)."""
        self._dev_rows = rows

    def flush(self):
        """Copy the samples the GPU made since the last flush to the host."""
        if self._dev is not None and self._dev_rows > self.rows:
            a, b = self.rows, self._dev_rows
            self._grow(b)
            self._values[a:b] = self._dev[0][a:b].copy_to_host()
            self._times[a:b] = self._dev[1][a:b].copy_to_host()
            self.rows = b

    # --- results ------------------------------------------------------------------------

    def samples(self):
        """``(times (n,), W (n, 6, gauges))``: the raw samples of every gauge, on rank 0
        (``(None, None)`` elsewhere); collective across ranks."""
        self.flush()
        t, v = self._times[:self.rows].copy(), self._values[:self.rows]
        if self.comm is None or self.comm.Get_size() == 1:
            return t, v.copy()
        parts = self.comm.gather((self.owned, t, v), root=0)
        if self.comm.Get_rank() != 0:
            return None, None
        W = np.full((len(t), 6, len(self.cells)), np.nan, dtype=v.dtype)
        for owned, tq, vq in parts:
            if len(tq) != len(t) or not np.array_equal(tq, t):
                raise RuntimeError("the ranks' gauge sample times differ")
            W[:, :, owned] = vq
        return t, W

    def data(self) -> dict | None:
        """``{gauge_id: {"t", "x", "y", field: (n,) array}}`` as
        :func:`forestpy.callbacks.read_gauges` returns a file, on rank 0 (``None``
        elsewhere); collective."""
        t, W = self.samples()
        if t is None:
            return None
        W = W.astype(np.float64)
        h1, h2 = W[:, 0], W[:, 3]
        f = {"h1": h1, "h2": h2, "u1x": W[:, 1] / h1, "u1y": W[:, 2] / h1,
             "u2x": W[:, 4] / h2, "u2y": W[:, 5] / h2, "interface": h2 - self.H,
             "surface": h1 + h2 - self.H}
        return {gid: {"t": t.copy(), "x": np.full(len(t), self.x[g]),
                      "y": np.full(len(t), self.y[g]), **{k: f[k][:, g] for k in FIELDS}}
                for g, gid in enumerate(self.ids)}

    def write(self, path) -> None:
        """Write the CSV (rank 0, atomically); collective across ranks."""
        from forestpy.io.summary import write_text_atomic

        d = self.data()
        if d is None:
            return
        lines = [",".join(["t", "gauge", "x", "y", *FIELDS])]
        t = next(iter(d.values()))["t"]
        for k in range(len(t)):
            for gid, s in d.items():
                lines.append(",".join([repr(float(t[k])), str(gid), repr(float(s["x"][k])),
                                       repr(float(s["y"][k])),
                                       *(repr(float(s[f][k])) for f in FIELDS)]))
        write_text_atomic(path, "\n".join(lines) + "\n")
