"""GeoClaw-style refinement: flags on the flow, regions, and topography gradients.

:class:`GeoClawRefinement` provides the two tagging callables of a
:class:`~forestpy.simulation.Simulation`, ``tag(q, aux, geom, t) -> bool[npatch]``
(refine) and ``coarsen(q, aux, geom, t) -> bool[npatch]`` (a family of four siblings
coarsens when all four are flagged).  A patch is flagged for refinement when any of its
interior cells

* is wet (``h > dry_tolerance``) and its surface departs from sea level by more than
  ``wave_tolerance``: ``|h + b - sea_level| > wave_tolerance``;
* moves faster than ``speed_tolerance`` (a number, or one per level: the entry of the
  patch's level, the last entry beyond);
* is wet and shallower than ``depth_tolerance`` (the coastal zone where inundation
  happens);
* with ``shoreline=True``: the patch holds wet and dry cells (keeps the shoreline at
  the finest level, so that regrids rarely cut through it);
* while ``t <= topo_until`` (the initial grid, by default only ``t == t0``): has an
  undivided difference of the bottom larger than ``topo_tolerance``;

and no :class:`Region` forbids it.  Regions are rectangles with a level range and a
time window: a patch that intersects an active region with ``min_level > level`` is
always refined (and never coarsened below that level), and a patch whose level is at
or above the largest ``max_level`` of the active regions it intersects is never
refined (and coarsened when it is above it).  Where no region is active the simulation's
``max_level`` applies.  A patch is flagged for coarsening when none of the refinement
criteria holds (with the tolerances halved, as a hysteresis) and no region keeps it.

The flow criteria are reduced on the backend's arrays (NumPy or CuPy); the region
masks come from the host geometry and are uploaded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from forestpy.backend import array_module

__all__ = ["Region", "GeoClawRefinement"]


@dataclass(frozen=True)
class Region:
    """A refinement rectangle ``[x1, x2] x [y1, y2]`` active for ``t1 <= t <= t2``.

    ``min_level``: patches intersecting it are refined at least to this level;
    ``max_level``: they are not refined beyond it (unless another active region that
    they intersect allows more).
    """

    x1: float
    x2: float
    y1: float
    y2: float
    min_level: int = 0
    max_level: int = 99
    t1: float = -math.inf
    t2: float = math.inf

    def __post_init__(self):
        if not (self.x1 < self.x2 and self.y1 < self.y2):
            raise ValueError(f"region needs x1 < x2 and y1 < y2, got {self}")
        if not 0 <= self.min_level <= self.max_level:
            raise ValueError(
                f"region needs 0 <= min_level <= max_level, got {self.min_level}, "
                f"{self.max_level}"
            )
        if not self.t1 <= self.t2:
            raise ValueError(f"region needs t1 <= t2, got {self.t1}, {self.t2}")

    def active(self, t: float) -> bool:
        return self.t1 <= t <= self.t2

    def intersects(self, geom) -> np.ndarray:
        """Per patch: does the patch's interior overlap the rectangle (open overlap)?"""
        x0 = geom.xlower
        y0 = geom.ylower
        x1 = x0 + geom.mx * geom.dx
        y1 = y0 + geom.my * geom.dy
        return (x0 < self.x2) & (x1 > self.x1) & (y0 < self.y2) & (y1 > self.y1)


class GeoClawRefinement:
    """Tagging callables ``tag`` and ``coarsen`` (see the module docstring).

    Parameters
    ----------
    sea_level, dry_tolerance : float
        As the Riemann solver's parameters.
    wave_tolerance : float or None
        Surface departure from sea level that flags a wet cell.
    speed_tolerance : float, sequence of float, or None
        Speed that flags a cell (per level when a sequence).
    depth_tolerance : float or None
        Wet cells shallower than this are flagged.
    topo_tolerance : float or None
        Undivided difference of the bottom (aux[0]) that flags a cell while
        ``t <= topo_until``.
    topo_until : float
        Last time at which the topography criterion applies (default: only the initial
        grid, ``t <= 0``).
    shoreline : bool
        Flag patches that hold both wet and dry cells.
    regions : sequence of Region
    max_level : int or None
        Finest level allowed where no region is active (default: unlimited here, the
        simulation's ``max_level`` caps it anyway).
    """

    def __init__(
        self,
        *,
        sea_level: float = 0.0,
        dry_tolerance: float = 1e-3,
        wave_tolerance: float | None = 0.1,
        speed_tolerance=None,
        depth_tolerance: float | None = None,
        topo_tolerance: float | None = None,
        topo_until: float = 0.0,
        shoreline: bool = False,
        regions: Sequence[Region] = (),
        max_level: int | None = None,
    ):
        for name, v in (("wave_tolerance", wave_tolerance),
                        ("depth_tolerance", depth_tolerance),
                        ("topo_tolerance", topo_tolerance)):
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 or None, got {v}")
        if speed_tolerance is not None:
            st = np.atleast_1d(np.asarray(speed_tolerance, dtype=np.float64))
            if st.ndim != 1 or len(st) == 0 or not np.all(st > 0):
                raise ValueError(f"speed_tolerance must be > 0 (one value or one per level), "
                                 f"got {speed_tolerance}")
            speed_tolerance = st
        for r in regions:
            if not isinstance(r, Region):
                raise TypeError(f"regions must be Region objects, got {type(r).__name__}")
        self.sea_level = float(sea_level)
        self.dry_tolerance = float(dry_tolerance)
        self.wave_tolerance = wave_tolerance
        self.speed_tolerance = speed_tolerance
        self.depth_tolerance = depth_tolerance
        self.topo_tolerance = topo_tolerance
        self.topo_until = float(topo_until)
        self.shoreline = bool(shoreline)
        self.regions = tuple(regions)
        self.max_level = max_level

    # ------------------------------------------------------------------ pieces
    def _flow_flags(self, q, aux, geom, t, relax: float):
        """Per patch (backend array): does any interior cell meet a flow criterion,
        with every tolerance multiplied by ``relax``?"""
        xp = array_module(q)
        b = geom.mbc
        h = q[:, 0, b:-b, b:-b]
        bot = aux[:, 0, b:-b, b:-b]
        wet = h > self.dry_tolerance
        flags = xp.zeros(q.shape[0], dtype=bool)
        if self.wave_tolerance is not None:
            dev = xp.abs(h + bot - self.sea_level)
            flags |= (wet & (dev > relax * self.wave_tolerance)).any(axis=(1, 2))
        if self.depth_tolerance is not None:
            flags |= (wet & (h < relax * self.depth_tolerance)).any(axis=(1, 2))
        if self.shoreline:
            flags |= wet.any(axis=(1, 2)) & ~wet.all(axis=(1, 2))
        if self.speed_tolerance is not None:
            safe = xp.where(wet, h, 1.0)
            hu = q[:, 1, b:-b, b:-b]
            hv = q[:, 2, b:-b, b:-b]
            speed = xp.where(wet, xp.sqrt(hu * hu + hv * hv) / safe, 0.0).max(axis=(1, 2))
            st = self.speed_tolerance
            tol = st[np.minimum(geom.level, len(st) - 1)]
            flags |= speed > relax * xp.asarray(tol)
        if self.topo_tolerance is not None and t <= self.topo_until:
            core = aux[:, 0, b - 1 : aux.shape[2] - b + 1, b - 1 : aux.shape[3] - b + 1]
            dx = xp.abs(xp.diff(core[:, 1:-1, :], axis=2)).max(axis=(1, 2))
            dy = xp.abs(xp.diff(core[:, :, 1:-1], axis=1)).max(axis=(1, 2))
            flags |= xp.maximum(dx, dy) > relax * self.topo_tolerance
        return flags

    def level_bounds(self, geom, t: float):
        """Per patch (host arrays): the level the active regions force (``lo``) and the
        finest level they allow (``hi``)."""
        n = len(geom.level)
        lo = np.zeros(n, dtype=np.int64)
        hi = np.full(n, 99 if self.max_level is None else self.max_level, dtype=np.int64)
        covered = np.zeros(n, dtype=bool)
        region_hi = np.zeros(n, dtype=np.int64)
        for r in self.regions:
            if not r.active(t):
                continue
            m = r.intersects(geom)
            lo[m] = np.maximum(lo[m], r.min_level)
            region_hi[m] = np.maximum(region_hi[m], r.max_level)
            covered |= m
        hi[covered] = region_hi[covered]
        return lo, hi

    # ------------------------------------------------------------------ callables
    def tag(self, q, aux, geom, t):
        """Refinement flags (``tag`` option of the Simulation)."""
        xp = array_module(q)
        lo, hi = self.level_bounds(geom, t)
        level = geom.level
        flags = self._flow_flags(q, aux, geom, t, 1.0)
        force = xp.asarray(level < lo)
        allow = xp.asarray(level < hi)
        return (flags | force) & allow

    def coarsen(self, q, aux, geom, t):
        """Coarsening flags (``tag4coarsening``)."""
        xp = array_module(q)
        lo, hi = self.level_bounds(geom, t)
        level = geom.level
        calm = ~self._flow_flags(q, aux, geom, t, 0.5)
        keep = xp.asarray(level <= lo)
        too_fine = xp.asarray(level > hi)
        return (calm & ~keep) | too_fine
