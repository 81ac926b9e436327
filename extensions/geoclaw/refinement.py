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

As a regrid criterion (``Simulation(regrid_flags=...)``, :mod:`forestpy.patches.tagging`)
the object is called once per tagging pass and gives both flags of every patch from one
compiled body per patch (a CPU ``prange`` loop, one CUDA thread per patch); the region
bounds of the patches are computed on the host once per forest and set of active
regions and kept as backend arrays, so a tagging pass uploads nothing.  ``tag`` and
``coarsen`` give the same flags from array operations (NumPy or CuPy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from forestpy.backend import array_module
from forestpy.indicators import nan_max, undivided_difference_patch
from forestpy.patches.tagging import per_patch

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

    # ------------------------------------------------------------------ criterion
    def reads_ghosts(self, t: float) -> bool:
        """Only the topography criterion reads ghost cells (the first layer)."""
        return self.topo_tolerance is not None and t <= self.topo_until

    def graph_key(self, t: float):
        """What the launches of :meth:`__call__` take from the host at time ``t``
        (which regions are active, whether the topography criterion is on): a pass is
        replayed from a CUDA graph while it stays the same (:mod:`forestpy.tag_graph`);
        everything else they read is made once per forest."""
        return tuple(r.active(t) for r in self.regions), self.reads_ghosts(t)

    def __call__(self, q, aux, patches, t):
        """Regrid flags (bit 0 refine, bit 1 coarsen) of the patches
        (:class:`~forestpy.patches.tagging.TaggedPatches`) in one pass: the flags of
        :meth:`tag` and :meth:`coarsen`."""
        xp = array_module(q)
        per_forest = self._per_forest(patches)
        active = tuple(r.active(t) for r in self.regions)
        bounds = per_forest["bounds"].get(active)
        if bounds is None:
            lo, hi = self.level_bounds(patches.geom, t)
            bounds = per_forest["bounds"][active] = tuple(
                patches.backend.to_device(a) for a in (lo, hi))
        # the tolerances in q's precision, as the array operations compare them
        tol = np.array([self.sea_level, self.dry_tolerance]
                       + [relax * (v or 0.0) for relax in (1.0, 0.5)
                          for v in (self.wave_tolerance, self.depth_tolerance,
                                    self.topo_tolerance)], dtype=q.dtype)
        use = ((1 if self.wave_tolerance is not None else 0)
               | (2 if self.depth_tolerance is not None else 0)
               | (4 if self.shoreline else 0)
               | (8 if self.speed_tolerance is not None else 0)
               | (16 if self.reads_ghosts(t) else 0))
        bits = xp.zeros(q.shape[0], dtype=np.uint8)
        per_patch(_flags_patch, _flags_patches, q.shape[0], q, aux, patches.geom.mbc,
                  per_forest["tolerances"](tol), use, per_forest["speed"], *bounds,
                  patches.level, bits, backend=patches.backend)
        return bits

    def _per_forest(self, patches) -> dict:
        """What the flags need of the patches that changes only with the forest: the
        region bounds per set of active regions, the speed tolerance of each patch's
        level (and half of it), kept until ``patches`` is replaced."""
        cached = getattr(self, "_forest_cache", None)
        if cached is not None and cached[0] is patches:
            return cached[1]
        be = patches.backend
        st = self.speed_tolerance
        speed = np.zeros((patches.npatch, 2))
        if st is not None:
            per_level = st[np.minimum(patches.geom.level, len(st) - 1)]
            speed = np.stack([per_level, 0.5 * per_level], axis=1)
        made = {}

        def tolerances(tol):  # uploaded once per forest and value
            key = tol.tobytes()
            if key not in made:
                made[key] = be.to_device(tol)
            return made[key]

        data = {"bounds": {}, "speed": be.to_device(np.ascontiguousarray(speed)),
                "tolerances": tolerances}
        self._forest_cache = (patches, data)
        return data

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


# the flow criteria of one patch at both tolerances (relax 1: refine, relax 0.5: calm for
# coarsening), in the arithmetic and precision of GeoClawRefinement._flow_flags
_SEA, _DRY, _WAVE, _DEPTH, _TOPO = 0, 1, 2, 3, 4  # tol[_WAVE + 3] etc.: relax 0.5


@numba.njit(inline="always")
def _flags_patch(q, aux, mbc, tol, use, speed_tol, lo, hi, level, bits, k):
    ny, nx = q.shape[2], q.shape[3]
    flow, calm_not = False, False  # relax 1 and relax 0.5 criteria met
    wet_any, dry_any = False, False
    fastest = 0.0
    for j in range(mbc, ny - mbc):
        for i in range(mbc, nx - mbc):
            h = q[k, 0, j, i]
            wet = h > tol[_DRY]
            if wet:
                wet_any = True
            else:
                dry_any = True
            if wet and use & 1:
                dev = abs(h + aux[k, 0, j, i] - tol[_SEA])
                flow |= dev > tol[_WAVE]
                calm_not |= dev > tol[_WAVE + 3]
            if wet and use & 2:
                flow |= h < tol[_DEPTH]
                calm_not |= h < tol[_DEPTH + 3]
            if use & 8:
                s = 0.0
                if wet:
                    hu, hv = q[k, 1, j, i], q[k, 2, j, i]
                    s = math.sqrt(hu * hu + hv * hv) / h
                fastest = nan_max(fastest, s)
    if use & 4 and wet_any and dry_any:
        flow = calm_not = True
    if use & 8:
        flow |= fastest > speed_tol[k, 0]
        calm_not |= fastest > speed_tol[k, 1]
    if use & 16:
        d = undivided_difference_patch(aux, k, 0, mbc)
        flow |= d > tol[_TOPO]
        calm_not |= d > tol[_TOPO + 3]
    lv = level[k]
    refine = (flow or lv < lo[k]) and lv < hi[k]
    coarsen = (not calm_not and not lv <= lo[k]) or lv > hi[k]
    bits[k] = (1 if refine else 0) | (2 if coarsen else 0)


@numba.njit(parallel=True, cache=True)
def _flags_patches(q, aux, mbc, tol, use, speed_tol, lo, hi, level, bits):
    for k in numba.prange(q.shape[0]):
        _flags_patch(q, aux, mbc, tol, use, speed_tol, lo, hi, level, bits, k)
