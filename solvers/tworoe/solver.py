"""First-order two-layer shallow-water solver on triangle meshes, CPU and GPU.

    from forestpy.solvers.tworoe import TwoLayerSolver, disc_in_square
    mesh = disc_in_square(4016)
    r = np.hypot(*mesh.centroid.T)
    h1 = np.where(r > 1.5, 4.0, 0.5)
    sim = TwoLayerSolver(mesh, h1=h1, h2=5.0 - h1, H=5.0, r=0.998)
    sim.run(0.1)

The state is ``W[k, cell]``, ``k``: ``h1, q1x, q1y, h2, q2x, q2y`` (layer 1 on top);
``H`` is the depth of the bottom below the reference level, so the interface is at
``h2 - H`` and the free surface at ``h1 + h2 - H``.  Each step is the seed's: fluxes of
every edge once (:mod:`~forestpy.solvers.tworoe.kernels`), the CFL step
``dt = min_i 2 γ |V_i| / Σ_j |Γ_ij| max|λ_ij|`` (γ = 0.9 by default), forward Euler.
Boundary edges are walls or open (a zero-gradient ghost) by tag.  A depth below
``h_min`` (initially or after a step) raises :class:`DepthError`: wet/dry fronts are
not handled (a later step).
"""

from __future__ import annotations

import time

import numpy as np

from . import kernels as K
from .mesh import TriMesh

__all__ = ["DepthError", "TwoLayerSolver", "layer_fields"]


class DepthError(ValueError):
    """A layer depth below the solver's minimum (wet/dry is not handled)."""


def _field(v, n, name, dtype):
    a = np.asarray(v, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{name} must be a scalar or one value per cell ({n}), got shape "
                         f"{a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} has a non-finite value at cell "
                         f"{int(np.flatnonzero(~np.isfinite(a))[0])}")
    return a.astype(dtype)


def advance_clock(t: float, dt: float, t_end: float) -> tuple[float, float]:
    """``(dt, t + dt)`` with the step cut to land on ``t_end``; a step that is not a
    finite positive number is an error."""
    if not np.isfinite(dt) or dt <= 0.0:
        raise FloatingPointError(f"no valid time step at t = {t} (dt = {dt})")
    if t + dt >= t_end:
        return t_end - t, t_end
    return dt, t + dt


class TwoLayerSolver:
    """Two-layer shallow water on a :class:`~forestpy.solvers.tworoe.mesh.TriMesh`.

    Parameters
    ----------
    mesh : TriMesh
    h1, h2 : float or (cells,) array
        Layer depths (upper, lower).
    H : float or (cells,) array
        Bottom depth below the reference level.
    q1, q2 : (cells, 2) arrays, optional
        Discharges (default zero).
    scheme : ``"irroe"`` (the seed's IR-Roe) or ``"ifcp"``.
    g, r : gravity and the density ratio ``rho1 / rho2`` (``0 < r < 1``).
    gamma : CFL number of the seed's rule, ``0 < gamma <= 1``.
    bc : ``"wall"``, ``"open"``, or ``{tag: "wall" | "open"}`` for the mesh's boundary
        tags (every tag present must be named).
    dtype : ``float64`` (default) or ``float32`` (FP32 storage and arithmetic).
    backend : ``"cpu"`` (Numba, threads) or ``"gpu"`` (Numba-CUDA).
    h_min : depths below this raise :class:`DepthError`.
    """

    def __init__(self, mesh: TriMesh, h1, h2, H, q1=None, q2=None, *, scheme="irroe",
                 g=9.81, r=0.998, gamma=0.9, bc="wall", dtype=np.float64, backend="cpu",
                 h_min=1e-6, sync_every=16):
        if not isinstance(mesh, TriMesh):
            raise TypeError(f"mesh must be a TriMesh, not {type(mesh).__name__}")
        if scheme not in K.SCHEMES:
            raise ValueError(f"scheme must be one of {sorted(K.SCHEMES)}, not {scheme!r}")
        if not (0.0 < r < 1.0):
            raise ValueError(f"r = rho1/rho2 must be in (0, 1), got {r}")
        if not (g > 0.0 and np.isfinite(g)):
            raise ValueError(f"g must be positive, got {g}")
        if not (0.0 < gamma <= 1.0):
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if not (h_min > 0.0):
            raise ValueError(f"h_min must be positive, got {h_min}")
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be float64 or float32, not {dtype}")
        if backend not in ("cpu", "gpu"):
            raise ValueError(f"backend must be 'cpu' or 'gpu', not {backend!r}")
        self.mesh = mesh
        self.scheme = scheme
        self.dtype = dtype
        self.backend = backend
        self.g, self.r, self.gamma, self.h_min = float(g), float(r), float(gamma), h_min
        self._g, self._r, self._gamma = dtype.type(g), dtype.type(r), dtype.type(gamma)
        n = mesh.num_cells
        W = np.zeros((6, n), dtype=dtype)
        W[0] = _field(h1, n, "h1", dtype)
        W[3] = _field(h2, n, "h2", dtype)
        for k, q, name in ((1, q1, "q1"), (4, q2, "q2")):
            if q is not None:
                q = np.asarray(q, dtype=np.float64)
                if q.shape != (n, 2) or not np.isfinite(q).all():
                    raise ValueError(f"{name} must be a finite (cells, 2) array, got shape "
                                     f"{q.shape}")
                W[k] = q[:, 0]
                W[k + 1] = q[:, 1]
        self.W = W
        self.H = _field(H, n, "H", dtype)
        self._check_depth(0)
        self._ebc = self._edge_bc(bc)
        ec = mesh.edge_cells
        self._el = np.ascontiguousarray(ec[:, 0], dtype=np.int32)
        self._er = np.ascontiguousarray(ec[:, 1], dtype=np.int32)
        self._nx = np.ascontiguousarray(mesh.normal[:, 0], dtype=dtype)
        self._ny = np.ascontiguousarray(mesh.normal[:, 1], dtype=dtype)
        self._ln = np.ascontiguousarray(mesh.length, dtype=dtype)
        self._ce = np.ascontiguousarray(mesh.cell_edges, dtype=np.int32)
        self._cs = np.ascontiguousarray(mesh.cell_side, dtype=np.int8)
        self._area = np.ascontiguousarray(mesh.area, dtype=dtype)
        self.t = 0.0
        self.steps = 0
        self.wall_seconds = 0.0
        self._sync_every = sync_every
        self._gpu = None
        self.gauges = None
        if backend == "cpu":
            self._kernels = K.cpu_kernels(scheme, dtype)
            self._out = np.empty((K.NOUT, mesh.num_edges), dtype=dtype)
            self._M = np.empty((6, n), dtype=dtype)
        self.mass0 = self.masses()

    def _edge_bc(self, bc):
        tags = self.mesh.edge_tag
        ebc = np.zeros(len(tags), dtype=np.int8)
        kinds = {"wall": K.BC_WALL, "open": K.BC_OPEN}
        present = sorted(int(t) for t in np.unique(tags[tags > 0]))
        if isinstance(bc, str):
            if bc not in kinds:
                raise ValueError(f"bc must be 'wall', 'open' or a dict, not {bc!r}")
            bc = dict.fromkeys(present, bc)
        missing = [t for t in present if t not in bc]
        if missing:
            raise ValueError(f"bc names no kind for boundary tag(s) {missing}")
        for t, kind in bc.items():
            if kind not in kinds:
                raise ValueError(f"bc kind for tag {t} must be 'wall' or 'open', not "
                                 f"{kind!r}")
            ebc[tags == int(t)] = kinds[kind]
        return ebc

    def _check_depth(self, step):
        h = np.minimum(self.W[0], self.W[3])
        bad = ~(h >= self.h_min)
        if bad.any():
            c = int(np.flatnonzero(bad)[0])
            layer = 1 if not (self.W[0, c] >= self.h_min) else 2
            val = self.W[0 if layer == 1 else 3, c]
            when = "initially" if step == 0 else f"after step {step} (t = {self.t:.6g})"
            raise DepthError(
                f"layer {layer} depth {val:.6g} below h_min = {self.h_min:g} at cell {c} "
                f"(centroid {self.mesh.centroid[c].tolist()}) {when}, {int(bad.sum())} "
                f"cell(s) in all: wet/dry fronts are not handled by this solver")

    # --- stepping -------------------------------------------------------------------

    def step(self, t_end: float = np.inf) -> float:
        """One CPU step (never past ``t_end``); returns its dt."""
        if self.backend != "cpu":
            raise RuntimeError("step() is the CPU path; the GPU runs with run()")
        edges, cells, update = self._kernels
        W = self.W
        edges(W, self.H, self._el, self._er, self._ebc, self._nx, self._ny, self._ln,
              self._g, self._r, self._out, 0, len(self._el))
        dt = float(cells(self._out, self._ce, self._cs, self._area, self._gamma, self._M))
        if not np.isfinite(dt) or dt <= 0.0:
            self._check_depth(self.steps + 1)
        dt, self.t = advance_clock(self.t, dt, t_end)
        hmin = update(W, self._M, self._area, dt)
        self.steps += 1
        if self.gauges is not None:
            self.gauges.record(W, self.t)
        if not (hmin >= self.h_min):
            self._check_depth(self.steps)
        return dt

    def run(self, t_final: float, copy_back: bool = True) -> dict:
        """Advance to ``t_final``; returns :meth:`stats`.  On the GPU the state comes
        back to ``W`` at the end unless ``copy_back`` is false (then :meth:`sync`)."""
        if not (t_final >= self.t):
            raise ValueError(f"t_final {t_final} is before the current time {self.t}")
        t0 = time.perf_counter()
        if self.backend == "cpu":
            while self.t < t_final:
                self.step(t_final)
        else:
            self.prepare()
            t, steps, hmin = self._gpu.advance(t_final)
            self.t = t
            self.steps = steps
            if not (hmin >= self.h_min):
                self.W = self._gpu.to_host()
                self._check_depth(self.steps)
            if copy_back:
                self.W = self._gpu.to_host()
        self.wall_seconds += time.perf_counter() - t0
        return self.stats()

    def add_gauges(self, points):
        """Gauges at ``points`` (``[(x, y), ...]`` or ``{id: (x, y)}``), sampled now and
        after every step (:mod:`~forestpy.solvers.tworoe.gauges`); returns them (also
        ``self.gauges``; one set per solver)."""
        from .gauges import TriangleGauges

        if self.gauges is not None:
            raise RuntimeError("this solver has its gauges already (one set per solver)")
        self.sync()
        self.gauges = TriangleGauges(self, points)
        return self.gauges

    def save_checkpoint(self, path):
        """Write the state, time and parameters (:mod:`.checkpoint`); returns the path."""
        from .checkpoint import write_checkpoint

        self.sync()
        return write_checkpoint(path, self)

    @classmethod
    def from_checkpoint(cls, path, mesh: TriMesh, **kw) -> TwoLayerSolver:
        """A solver continuing the run saved in ``path`` on ``mesh`` (the same mesh);
        ``kw``: ``bc``, ``backend``, ``sync_every`` (the physics comes from the file)."""
        from .checkpoint import read_checkpoint

        c = read_checkpoint(path, mesh)
        sim = cls(mesh, **cls._checkpoint_args(c), **kw)
        sim.t, sim.steps, sim.mass0 = float(c["t"]), int(c["steps"]), c["mass0"]
        return sim

    @staticmethod
    def _checkpoint_args(c) -> dict:
        W = c["W"]
        return dict(h1=W[0], h2=W[3], H=c["H"], q1=W[1:3].T, q2=W[4:6].T,
                    scheme=c["scheme"], dtype=np.dtype(c["dtype"]), g=float(c["g"]),
                    r=float(c["r"]), gamma=float(c["gamma"]), h_min=float(c["h_min"]))

    def prepare(self):
        """On the GPU: copy the mesh and the state to the device now (``run`` does it
        otherwise on its first call; a benchmark keeps it out of the timing)."""
        if self.backend == "gpu" and self._gpu is None:
            from .gpu import GPUStepper

            self._gpu = GPUStepper(self, self._sync_every)

    def sync(self):
        """Copy the GPU state to ``W`` (no-op on the CPU)."""
        if self._gpu is not None:
            self.W = self._gpu.to_host()

    # --- diagnostics ----------------------------------------------------------------

    def masses(self) -> tuple[float, float]:
        """Volume of each layer, ``sum |V_i| h_{k,i}`` (in FP64)."""
        a = self.mesh.area
        return (float(np.dot(a, self.W[0].astype(np.float64))),
                float(np.dot(a, self.W[3].astype(np.float64))))

    def stats(self) -> dict:
        m = self.masses()
        n = self.mesh.num_cells
        return {"t": self.t, "steps": self.steps, "cells": n, "scheme": self.scheme,
                "dtype": self.dtype.name, "backend": self.backend,
                "wall_seconds": self.wall_seconds,
                "cell_updates_per_second": (n * self.steps / self.wall_seconds
                                            if self.wall_seconds > 0 else None),
                "mass_rel_change": [abs(m[k] - self.mass0[k]) / self.mass0[k]
                                    for k in range(2)]}

    def fields(self) -> dict:
        """Per-cell output fields: depths, velocities, interface and surface elevation."""
        return layer_fields(self.W, self.H)


def layer_fields(W, H) -> dict:
    """The output fields of the state ``W (6, n)`` over the bottom depth ``H (n,)`` (in
    FP64): ``h1``, ``h2``, velocities ``u1``, ``u2`` ``(n, 2)``, ``interface`` (``h2 -
    H``), ``surface`` (``h1 + h2 - H``) and ``bottom`` (``-H``)."""
    W = np.asarray(W).astype(np.float64)  # a copy: the fields outlive the step
    H = np.asarray(H).astype(np.float64)
    return {"h1": W[0], "h2": W[3],
            "u1": np.stack([W[1] / W[0], W[2] / W[0]], 1),
            "u2": np.stack([W[4] / W[3], W[5] / W[3]], 1),
            "interface": W[3] - H, "surface": W[0] + W[3] - H, "bottom": -H}
