r"""Split source terms of GeoClaw-like shallow water, batched over all patches.

:class:`GeoClawSources` is a ``src2`` hook (:class:`~forestpy.vtable.SolverVtable`):
after each wave-propagation step it updates the interiors of all patches at once with
array operations of the backend's array module (NumPy on the CPU, CuPy on the GPU), in
this order:

1. **Discharge sources** (:class:`DischargeSource`): a volume rate ``Q(t)`` (m^3/s)
   spread uniformly over the leaf cells whose centres lie in a disc (or over the single
   cell that contains a point).  The depth increment is ``Q dt / A`` with ``A`` the
   total area of the selected cells, so the volume added is exactly ``Q dt``.
2. **Manning friction**, semi-implicit (GeoClaw's form):

   .. math::

       (hu, hv) \leftarrow \frac{(hu, hv)}{1 + \Delta t\, g n^2 |\mathbf u| / h^{4/3}},

   unconditionally stable for thin layers and, for a fixed depth, exact for the
   deceleration ODE :math:`\dot u = -g n^2 u |u| / h^{4/3}` (its solution satisfies
   :math:`1/u(t + \Delta t) = 1/u(t) + g n^2 \Delta t / h^{4/3}`).  ``n`` is a constant
   or an aux field (per-region values or a raster, see :mod:`.model`).
3. **Coriolis** (optional), an exact rotation of the momentum by the angle
   :math:`-f \Delta t` with :math:`f = f_0 + \beta (y - y_0)` (f-plane when
   :math:`\beta = 0`).
0. **Positivity**: the first-order update of :mod:`.riemann` keeps depths
   non-negative, the second-order and transverse corrections may not; a negative depth
   is set to zero and the missing volume is taken from the other cells of its patch in
   proportion to their depth, the rest (rare) from the whole domain (exactly
   conservative; counted in
   :attr:`GeoClawSources.volume_redistributed`).
4. **Dry cells and the speed limit**: momentum is zeroed where ``h <= dry_tolerance``,
   and scaled down where the speed exceeds ``speed_limit`` (spurious fast thin layers).

None of these changes the depth except the discharge sources, so mass is conserved to
round-off when there are none.

References
----------
D. L. George, Augmented Riemann solvers for the shallow water equations over variable
topography with steady states and inundation, *J. Comput. Phys.* 227 (2008) 3089-3113.
M. J. Berger, D. L. George, R. J. LeVeque and K. T. Mandli, The GeoClaw software for
depth-averaged flows with adaptive refinement, *Adv. Water Resour.* 34 (2011) 1195-1206.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from forestpy.backend import array_module

__all__ = ["DischargeSource", "Coriolis", "GeoClawSources", "EARTH_OMEGA", "EARTH_RADIUS"]

EARTH_OMEGA = 7.2921159e-5  # rad/s
EARTH_RADIUS = 6.3710e6  # m


@dataclass(frozen=True)
class DischargeSource:
    """A volume rate ``Q`` (m^3/s) injected at a point or over a disc.

    Parameters
    ----------
    x, y : float
        Centre of the disc (or the point).
    discharge : float or callable
        ``Q`` in m^3/s, or ``Q(t)``.  Must be non-negative (sinks are not supported:
        they could not keep the depth non-negative and the volume exact at once).
    radius : float
        Disc radius; ``0`` makes a point source (the leaf cell containing the point).
        A disc that contains no cell centre falls back to the cell containing its
        centre.
    """

    x: float
    y: float
    discharge: float | Callable[[float], float]
    radius: float = 0.0

    def __post_init__(self):
        if not (math.isfinite(self.x) and math.isfinite(self.y)):
            raise ValueError(f"discharge source position ({self.x}, {self.y}) is not finite")
        if not self.radius >= 0.0:
            raise ValueError(f"discharge source radius must be >= 0, got {self.radius}")
        if not callable(self.discharge) and not float(self.discharge) >= 0.0:
            raise ValueError(f"discharge must be >= 0 m^3/s, got {self.discharge}")

    def rate(self, t: float) -> float:
        q = float(self.discharge(t)) if callable(self.discharge) else float(self.discharge)
        if not q >= 0.0:
            raise ValueError(f"discharge source at ({self.x}, {self.y}): Q({t}) = {q} < 0")
        return q


@dataclass(frozen=True)
class Coriolis:
    """Coriolis parameter ``f = f0 + beta (y - y0)`` (1/s).

    Use :meth:`at_latitude` for the f-plane (``beta=False``) or beta-plane
    approximation around a latitude.
    """

    f0: float
    beta: float = 0.0
    y0: float = 0.0

    @classmethod
    def at_latitude(cls, latitude_deg: float, y0: float = 0.0, beta: bool = True) -> Coriolis:
        """``f0 = 2 Omega sin(lat)``, ``beta = 2 Omega cos(lat) / R`` (m^-1 s^-1) with
        ``y`` in metres northwards from ``y0`` (the latitude's position)."""
        lat = math.radians(latitude_deg)
        f0 = 2.0 * EARTH_OMEGA * math.sin(lat)
        b = 2.0 * EARTH_OMEGA * math.cos(lat) / EARTH_RADIUS if beta else 0.0
        return cls(f0=f0, beta=b, y0=y0)


class GeoClawSources:
    """The ``src2`` hook: discharge sources, Manning friction, Coriolis, dry cells and
    speed limit (see the module docstring).

    Parameters
    ----------
    grav, dry_tolerance : float
        As the Riemann solver's parameters.
    manning : float or None
        Constant Manning coefficient (s m^-1/3); ``None`` or 0: no friction unless
        ``manning_aux`` is given.
    manning_aux : int or None
        Index of an aux field holding ``n`` per cell (overrides ``manning``).
    friction_depth : float
        Friction acts only where ``h`` is below this (GeoClaw's ``friction_depth``);
        ``inf`` everywhere.
    sources : sequence of DischargeSource
    coriolis : Coriolis or None
    speed_limit : float
        Largest speed kept (m/s); ``inf`` disables.

    Call :meth:`bind` with the :class:`~forestpy.simulation.Simulation` before the
    first step (discharge sources need the patch geometry); :func:`.model.geoclaw_simulation`
    does this.
    """

    def __init__(
        self,
        *,
        grav: float = 9.81,
        dry_tolerance: float = 1e-3,
        manning: float | None = None,
        manning_aux: int | None = None,
        friction_depth: float = math.inf,
        sources: Sequence[DischargeSource] = (),
        coriolis: Coriolis | None = None,
        speed_limit: float = math.inf,
    ):
        if not grav > 0:
            raise ValueError(f"grav must be > 0, got {grav}")
        if not dry_tolerance >= 0:
            raise ValueError(f"dry_tolerance must be >= 0, got {dry_tolerance}")
        if manning is not None and not manning >= 0:
            raise ValueError(f"Manning coefficient must be >= 0, got {manning}")
        if manning_aux is not None and manning_aux < 1:
            raise ValueError(f"manning_aux={manning_aux}: aux[0] is the bottom elevation")
        if not speed_limit > 0:
            raise ValueError(f"speed_limit must be > 0, got {speed_limit}")
        for s in sources:
            if not isinstance(s, DischargeSource):
                raise TypeError(f"sources must be DischargeSource objects, got {type(s).__name__}")
        self.grav = float(grav)
        self.dry_tolerance = float(dry_tolerance)
        self.manning = float(manning or 0.0)
        self.manning_aux = manning_aux
        self.friction_depth = float(friction_depth)
        self.sources = tuple(sources)
        self.coriolis = coriolis
        self.speed_limit = float(speed_limit)
        self.sim = None
        self._cells_for = None  # geometry the source cells were computed for
        self._cells = []
        self._level_cells_of = {}  # id(level rows) -> (rows, geometry, _level_cells)
        self._added = 0.0  # volume injected by the discharge sources (accepted steps)
        self._redistributed = 0.0  # volume moved by the positivity fix (backend scalar)
        self._pending = None  # (steps, added, redistributed) of the last call

    def bind(self, sim) -> GeoClawSources:
        """Attach the simulation whose owned patches (``sim.owned``: ``geom``,
        ``patch_arrays``) and backend the discharge sources use; returns ``self``."""
        self.sim = sim
        self._cells_for = None
        return self

    def _comm(self):
        """The simulation's communicator when it has several ranks, else None."""
        comm = getattr(self.sim, "comm", None)
        return None if comm is None or comm.size == 1 else comm

    def _owned(self):
        """The patches the hook is called on: the simulation's owned patches (``geom``,
        ``patch_arrays``, ``centers_host``; every patch of a serial run); a bare
        namespace standing for a simulation is its own."""
        return getattr(self.sim, "owned", self.sim)

    # ------------------------------------------------------------------ sources
    def _source_cells(self):
        """Per source: (index arrays into the interior, area of the selected cells),
        recomputed after every regrid (the geometry object changes).

        In a distributed run (``sim.comm`` with several ranks; the hook then sees the
        owned patches of each rank, and every rank calls it) each rank selects its own
        cells; the area is that of the cells of all ranks, summed in global patch order
        (the serial sum), and the fallback cell lies on the first rank holding it."""
        sim = self.sim
        owned = self._owned()
        if self._cells_for is owned.geom:
            return self._cells
        comm = self._comm()
        g = owned.geom
        b = g.mbc
        x, y = owned.centers_host
        xi = x[:, b:-b, b:-b]
        yi = y[:, b:-b, b:-b]
        area = (g.dx * g.dy)[:, None, None] * np.ones_like(xi)
        cells = []
        for src in self.sources:
            sel = (xi - src.x) ** 2 + (yi - src.y) ** 2 <= src.radius**2
            parts = [area[sel]] if comm is None else comm.allgather(area[sel])
            if not any(len(part) for part in parts):  # the leaf cell containing the centre
                ip = np.flatnonzero(
                    (g.xlower <= src.x) & (src.x < g.xlower + g.mx * g.dx)
                    & (g.ylower <= src.y) & (src.y < g.ylower + g.my * g.dy)
                )
                found = [len(ip) > 0] if comm is None else comm.allgather(len(ip) > 0)
                if not any(found):
                    raise ValueError(f"discharge source at ({src.x}, {src.y}) lies outside "
                                     "the domain")
                sel = np.zeros_like(sel)
                if found.index(True) == (0 if comm is None else comm.rank):
                    p = int(ip[0])
                    i = min(int((src.x - g.xlower[p]) / g.dx[p]), g.mx - 1)
                    j = min(int((src.y - g.ylower[p]) / g.dy[p]), g.my - 1)
                    sel[p, j, i] = True
                parts = [area[sel]] if comm is None else comm.allgather(area[sel])
            idx = np.nonzero(sel)
            total = float(np.concatenate(parts).sum())
            cells.append((tuple(sim.backend.to_device(a) for a in idx), total))
        self._cells = cells
        self._cells_for = g
        return cells

    def _level_cells(self):
        """:meth:`_source_cells` of the patches the hook is called on: every owned
        patch, or (subcycled level steps, ``sim.hook_rows``) one level's, renumbered.
        Each entry: (index arrays, the source's whole area, the share of it on these
        patches).  Made once per level and regrid (the level's rows are one array
        until the next regrid), so no step copies indices between host and device."""
        cells = self._source_cells()
        rows = getattr(self.sim, "hook_rows", None)
        if rows is None:
            return [(idx, area, 1.0) for idx, area in cells]
        got = self._level_cells_of.get(id(rows))
        if got is not None and got[0] is rows and got[1] is self._cells_for:
            return got[2]
        be = self.sim.backend
        g = self._owned().geom
        position = np.full(g.npatch, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        level_cells = []
        for idx, area in cells:
            p, j, i = (be.to_host(a) for a in idx)
            at = position[p]
            keep = at >= 0
            here = float((g.dx * g.dy)[p[keep]].sum())
            level_cells.append((tuple(be.to_device(a) for a in (at[keep], j[keep], i[keep])),
                                area, here / area))
        if len(self._level_cells_of) > 64:
            self._level_cells_of.clear()
        self._level_cells_of[id(rows)] = (rows, self._cells_for, level_cells)
        return level_cells

    # ------------------------------------------------------------------ hook
    def _commit(self):
        """The hook runs before the step's Courant number is checked: the counts of a
        call become final once the simulation has accepted its step."""
        if self._pending is not None and self.sim.steps > self._pending[0]:
            self._added += self._pending[1]
            self._redistributed = self._redistributed + self._pending[2]
            self._pending = None

    def _host(self, v) -> float:
        return float(self.sim.backend.to_host(v)) if hasattr(v, "shape") else float(v)

    @property
    def volume_added(self) -> float:
        """Volume injected by the discharge sources in the accepted steps."""
        self._commit()
        return float(self._added)

    @property
    def volume_redistributed(self) -> float:
        """Volume moved by the positivity fix in the accepted steps (a host transfer on
        the GPU)."""
        self._commit()
        return self._host(self._redistributed)

    def _restore_positivity(self, xp, h, hu, hv):
        """Negative depths (from the second-order and transverse corrections) are set to
        zero and the missing volume is taken from the other cells of the same patch in
        proportion to their depth; what a patch cannot cover (it holds less water than
        it lacks) is taken from all cells of the domain in proportion to their depth.
        The total volume is kept to round-off; when no depth is negative every value is
        left bit for bit (all scale factors are exactly 1).

        In a distributed run the domain-wide part reduces over all ranks (every rank
        calls the hook, so the collectives match): the leftover always, the volume only
        when some rank has a leftover (rare; the volume's sum then differs from the
        serial one by round-off).  With no leftover anywhere the result is bitwise the
        serial one.  Returns the volume moved, over all ranks (``volume_redistributed``
        is then the domain's on every rank).  Called on one level of a subcycled step
        (``sim.hook_rows``), the domain-wide part takes from the other levels' cells
        too, in the simulation's state."""
        comm = self._comm()
        if xp is np and comm is None and not (h < 0.0).any():  # the usual case, on host
            return 0.0
        if xp is np and comm is not None:
            from mpi4py import MPI

            if not comm.allreduce(bool((h < 0.0).any()), op=MPI.LOR):
                return 0.0
        pa = self._owned().patch_arrays
        area = pa.dx * pa.dy
        # one level of a subcycled step (sim.hook_rows): its patches here, the other
        # levels' in the simulation's state, where the domain-wide part also takes from
        rows = getattr(self.sim, "hook_rows", None)
        here = area if rows is None else area[self.sim.backend.to_device(rows)]
        neg = xp.minimum(h, 0.0)
        deficit = -neg.sum(axis=(1, 2))
        pos = h - neg  # max(h, 0)
        total = pos.sum(axis=(1, 2))
        covered = xp.minimum(deficit, total)
        local = 1.0 - covered / xp.where(total > 0.0, total, 1.0)
        leftover = ((deficit - covered) * here).sum()
        volume = (total * here).sum() - (covered * here).sum()
        moved = (deficit * here).sum()
        if comm is not None:  # one reduction for both: the leftover and the diagnostic
            leftover, moved = comm.allreduce(np.array([float(leftover), float(moved)]))
        others = None
        if rows is not None and leftover > 0.0:  # rare: then the other levels' volume
            others = self._other_rows(area.shape[0], rows)
            b = self.sim.mbc
            depth = self.sim.q[others, 0, b:-b, b:-b].sum(axis=(1, 2))
            volume = volume + (depth * area[others]).sum()
        if comm is not None and leftover > 0.0:
            volume = comm.allreduce(float(volume))
        # volume is a host float after the reduction above: CuPy's where needs an array
        volume = xp.asarray(volume)
        glob = 1.0 - leftover / xp.where(volume > 0.0, volume, 1.0)
        if others is not None:
            b = self.sim.mbc
            self.sim.q[others, :, b:-b, b:-b] *= glob  # the momenta with the depth
        scale = (local * glob)[:, None, None]
        dry = neg < 0.0
        h[...] = pos * scale
        hu[...] = xp.where(dry, 0.0, hu * scale)
        hv[...] = xp.where(dry, 0.0, hv * scale)
        return moved

    def _other_rows(self, n: int, rows):
        """The owned rows (backend indices) that are not ``rows``."""
        others = np.ones(n, dtype=bool)
        others[rows] = False
        return self.sim.backend.to_device(np.flatnonzero(others))

    def __call__(self, q, aux, x, y, t, dt):
        """Update the interiors of ``q`` in place (the ``src2`` contract)."""
        if self.sim is None:
            raise RuntimeError("GeoClawSources needs bind(sim) before the first step")
        xp = array_module(q)
        b = self.sim.mbc
        h = q[:, 0, b:-b, b:-b]
        hu = q[:, 1, b:-b, b:-b]
        hv = q[:, 2, b:-b, b:-b]
        self._commit()
        # the calls of one step (one per level when the levels subcycle) add up; a call
        # not followed by an accepted step is discarded
        key = (self.sim.steps, getattr(self.sim, "rejected_steps", 0))
        before = self._pending if self._pending is not None and self._pending[3] == key \
            else (None, 0.0, 0.0, key)
        self._pending = None
        moved = self._restore_positivity(xp, h, hu, hv)
        added = 0.0
        if self.sources:
            for src, (idx, area, share) in zip(self.sources, self._level_cells()):
                rate = src.rate(t)
                if rate > 0.0:
                    h[idx] += rate * dt / area
                    added += rate * dt if share == 1.0 else rate * dt * share
        self._pending = (self.sim.steps, before[1] + added, before[2] + moved, key)
        wet = h > self.dry_tolerance
        safe_h = xp.where(wet, h, 1.0)
        if self.manning_aux is not None or self.manning > 0.0:
            n = aux[:, self.manning_aux, b:-b, b:-b] if self.manning_aux is not None \
                else self.manning
            # dt g n^2 |u| / h^(4/3) = dt g n^2 |hu| h^(-7/3)
            gamma = xp.sqrt(hu * hu + hv * hv)
            gamma *= safe_h ** (-7.0 / 3.0)
            gamma *= (dt * self.grav) * (n * n)
            if math.isfinite(self.friction_depth):
                gamma *= h < self.friction_depth
            gamma += 1.0
            hu /= gamma
            hv /= gamma
        if self.coriolis is not None:
            c = self.coriolis
            f = c.f0 + c.beta * (y[:, b:-b, b:-b] - c.y0) if c.beta != 0.0 else c.f0
            theta = f * dt
            cs = xp.cos(theta) if c.beta != 0.0 else math.cos(theta)
            sn = xp.sin(theta) if c.beta != 0.0 else math.sin(theta)
            hu_old = hu.copy()
            hu[...] = cs * hu + sn * hv
            hv[...] = cs * hv - sn * hu_old
        if math.isfinite(self.speed_limit):
            speed = xp.sqrt(hu * hu + hv * hv) / safe_h
            scale = xp.where(speed > self.speed_limit,
                             self.speed_limit / xp.where(speed > 0, speed, 1.0), 1.0)
            hu *= scale
            hv *= scale
        hu *= wet
        hv *= wet
