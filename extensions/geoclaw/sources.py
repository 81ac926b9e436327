r"""Split source terms of GeoClaw-like shallow water, batched over all patches.

:class:`GeoClawSources` is a ``src2`` hook (:class:`~forestpy.vtable.SolverVtable`)
taking a context (:mod:`forestpy.hooks`): after each wave-propagation step it updates
the interiors of the call's patches with two compiled launches (the same source for
the CPU and the GPU: the positivity fix's per-patch sums, then every source of a cell),
in this order:

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
   conservative; counted in :attr:`GeoClawSources.volume_redistributed`).  This comes
   first: the factor of the whole domain must be known before the other sources act
   on the depths.
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

import numba
import numpy as np

from forestpy.patches.launch import PatchReduction, for_each_cell, for_each_patch

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


# ---------------------------------------------------------------- the kernels' bodies
# Two launches a call (forestpy.patches.launch): the per-patch sums of the positivity
# fix (a CPU prange iteration or a CUDA block per patch; its last block derives the
# domain-wide factor), then every source of a cell (a CUDA thread per cell).  The fix
# must know the domain-wide factor before the other sources act on the depths, as the
# array operations it replaces did, so that the results do not change.
#
# ``slot[k]``: the batch row of owned patch k, -1 for the other levels' patches (used
# when ``f[_SLOTS]``: one level of a subcycled step).  ``partial[r]``: the per-patch
# results ``_patch_share`` writes; ``totals``: their sums, the other levels' volume and
# (last) the domain-wide factor.
_DT, _GRAV, _DRY, _MANNING, _FRICTION_DEPTH, _F0, _BETA, _Y0, _COS, _SIN, _SPEED = range(11)
_MANNING_AUX, _FRICTION, _DEPTH_LIMITED, _CORIOLIS, _SPEED_LIMITED, _NSRC, _SLOTS, \
    _ONE_RANK = range(8)
_LOCAL, _MOVED, _LEFTOVER, _VOLUME, _COVERED, _OTHERS, _GLOBAL = range(7)


@numba.njit(inline="always")
def _power_minus_seven_thirds(h):
    """``h ** (-7/3)`` for ``h > 0`` from additions, multiplications and divisions
    only, so that the CPU and the GPU get the same bits (their ``pow`` come from two
    libraries that differ in the last place, and friction at a wet/dry front turns such
    differences into different runs).  ``h = m 8^e`` with ``m`` in [1, 8) by exact
    scalings, Newton's iteration for the cube root of ``m`` from a linear guess (six
    steps: relative error below 1e-16), then ``1 / (h^2 cbrt(h))``."""
    m = h
    scale = 1.0
    while m >= 8.0:
        m *= 0.125
        scale *= 2.0
    while m < 1.0:
        m *= 8.0
        scale *= 0.5
    y = 0.8 + 0.15 * m  # cbrt on [1, 8) within 20 %
    for _ in range(6):
        y = y - (y * y * y - m) / (3.0 * y * y)
    return 1.0 / (h * h * (y * scale))


@numba.njit(inline="always")
def _negative_part(h):
    """``min(h, 0)`` as NumPy's ``minimum`` (NaN kept)."""
    return h if (h < 0.0 or h != h) else 0.0


@numba.njit(inline="always")
def _water_sums(q, area, slot, f, k, j, i, mbc, acc):
    """The patch's missing volume (``acc[0]``, the depths below zero) and the volume of
    its positive depths (``acc[1]``), per unit area."""
    h = float(q[k, 0, mbc + j, mbc + i])
    neg = _negative_part(h)
    acc[0] -= neg
    acc[1] += h - neg


@numba.njit(inline="always")
def _patch_share(q, area, slot, f, k, sums, vals):
    """The factor of the patch's positive depths that covers its deficit; the volumes
    moved, not covered (taken from the whole domain), positive and covered."""
    deficit = sums[0]
    total = sums[1]
    covered = deficit if (deficit < total or deficit != deficit) else total
    a = area[k]
    vals[_LOCAL] = 1.0 - covered / (total if total > 0.0 else 1.0)
    vals[_MOVED] = deficit * a
    vals[_LEFTOVER] = (deficit - covered) * a
    vals[_VOLUME] = total * a
    vals[_COVERED] = covered * a


@numba.njit(inline="always")
def _other_levels_give(q, area, slot, f, totals):
    return f[_SLOTS] != 0 and f[_ONE_RANK] != 0 and totals[_LEFTOVER] > 0.0


@numba.njit(inline="always")
def _other_level_volume(q, area, slot, f, totals, k, j, i, mbc, acc):
    if slot[k] < 0:
        acc[0] += q[k, 0, mbc + j, mbc + i] * area[k]


@numba.njit(inline="always")
def _domain_factor(q, area, slot, f, totals):
    """The share every cell of the domain keeps when the patches left some deficit
    uncovered (1 when none did)."""
    volume = totals[_VOLUME] - totals[_COVERED] + totals[_OTHERS]
    totals[_GLOBAL] = 1.0 - totals[_LEFTOVER] / (volume if volume > 0.0 else 1.0)


@numba.njit(inline="always")
def _sources_cell(q, aux, ylower, dy, partial, totals, slot, cells, inc, c, f, k, j, i,
                  mbc):
    """Every source of one cell, in the order of the module docstring, in float64."""
    J = mbc + j
    I = mbc + i
    glob = totals[_GLOBAL]
    r = slot[k] if f[_SLOTS] else k
    if r < 0:  # another level's patch: it gives its share of an uncovered deficit
        if glob != 1.0:
            for m in range(q.shape[1]):
                q[k, m, J, I] *= glob
        return
    h = float(q[k, 0, J, I])
    hu = float(q[k, 1, J, I])
    hv = float(q[k, 2, J, I])
    if partial[r, _MOVED] > 0.0 or glob != 1.0:  # elsewhere every factor is exactly 1
        neg = _negative_part(h)
        scale = partial[r, _LOCAL] * glob
        h = (h - neg) * scale
        hu = 0.0 if neg < 0.0 else hu * scale
        hv = 0.0 if neg < 0.0 else hv * scale
    if f[_NSRC] > 0:
        bits = cells[k, j, i]
        for s in range(f[_NSRC]):
            if (bits >> s) & 1 and inc[s] != 0.0:
                h += inc[s]
    wet = h > c[_DRY]
    safe_h = h if wet else 1.0
    if f[_FRICTION]:
        n = float(aux[k, f[_MANNING_AUX], J, I]) if f[_MANNING_AUX] >= 0 else c[_MANNING]
        # dt g n^2 |u| / h^(4/3) = dt g n^2 |hu| h^(-7/3)
        gamma = math.sqrt(hu * hu + hv * hv)
        gamma *= _power_minus_seven_thirds(safe_h)
        gamma *= (c[_DT] * c[_GRAV]) * (n * n)
        if f[_DEPTH_LIMITED]:
            gamma *= 1.0 if h < c[_FRICTION_DEPTH] else 0.0
        gamma += 1.0
        hu /= gamma
        hv /= gamma
    if f[_CORIOLIS]:
        cs = c[_COS]
        sn = c[_SIN]
        if f[_CORIOLIS] == 2:  # beta plane: the angle varies with y
            y = ylower[k] + dy[k] * (j + 0.5)
            theta = (c[_F0] + c[_BETA] * (y - c[_Y0])) * c[_DT]
            cs = math.cos(theta)
            sn = math.sin(theta)
        hu_old = hu
        hu = cs * hu + sn * hv
        hv = cs * hv - sn * hu_old
    if f[_SPEED_LIMITED]:
        speed = math.sqrt(hu * hu + hv * hv) / safe_h
        if speed > c[_SPEED]:
            scale = c[_SPEED] / speed
            hu *= scale
            hv *= scale
    dry = 1.0 if wet else 0.0
    q[k, 0, J, I] = h
    q[k, 1, J, I] = hu * dry
    q[k, 2, J, I] = hv * dry


POSITIVITY_SUMS = PatchReduction(_water_sums, _patch_share, nacc=2, nvals=5,
                                 domain_needed=_other_levels_give,
                                 domain_reduce=_other_level_volume, ndomain=1,
                                 finish=_domain_factor)
MAX_SOURCES = 63  # one bit per source in the int64 cell map


class GeoClawSources:
    """The ``src2`` hook: discharge sources, Manning friction, Coriolis, dry cells and
    speed limit (see the module docstring), two compiled launches per call.

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
        At most 63.
    coriolis : Coriolis or None
    speed_limit : float
        Largest speed kept (m/s); ``inf`` disables.

    A hook that takes a context (:mod:`forestpy.hooks`): the simulation calls
    :meth:`apply`.  :meth:`bind` attaches the simulation whose accepted steps the
    volume counters follow (and that a direct call uses); :func:`.model.geoclaw_simulation`
    does this.
    """

    takes_context = True

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
        if len(sources) > MAX_SOURCES:
            raise ValueError(f"at most {MAX_SOURCES} discharge sources, got {len(sources)}")
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
        self._cell_bits = None  # backend int64 (npatch, my, mx): a bit per source
        self._level_share = {}  # id(level rows) -> (rows, share per source)
        self._level_slots = {}  # id(level rows) -> (rows, geometry, backend slots)
        self._no_slot = None
        self._partial = None  # per-patch results of the positivity sums (backend)
        self._totals = None  # and their sums over the call (reused: a graph replays it)
        self._added = 0.0  # volume injected by the discharge sources (accepted steps)
        self._moved = []  # per accepted call: backend totals (moved at [1]) or a float
        self._moved_folded = 0.0
        self._pending = None  # (steps, added, moved parts, (steps, rejected)) of a step

    def bind(self, sim) -> GeoClawSources:
        """Attach the simulation whose accepted steps the volume counters follow (and
        whose owned patches a direct call updates); returns ``self``."""
        self.sim = sim
        self._cells_for = None
        return self

    def _context(self, t=None, dt=0.0):
        """The bound simulation's context (direct calls, tests)."""
        if self.sim is None:
            raise RuntimeError("GeoClawSources needs bind(sim) (or a context)")
        return self.sim.hook_context(self.sim.t if t is None else t, dt)

    # ------------------------------------------------------------------ sources
    def _source_cells(self, context=None):
        """Per source: (host index arrays into the interiors of the owned patches, area
        of the selected cells), recomputed after every regrid (the geometry changes).

        In a distributed run (the context's ``comm``; every rank calls the hook) each
        rank selects its own cells; the area is that of the cells of all ranks, summed
        in global patch order (the serial sum), and the fallback cell lies on the first
        rank holding it."""
        ctx = self._context() if context is None else context
        geometry = ctx.geometry
        if self._cells_for is geometry.host:
            return self._cells
        g = geometry.host
        if not self.sources:
            self._cells, self._cells_for = [], g
            if self._cell_bits is None:
                self._cell_bits = ctx.backend.to_device(np.zeros((1, 1, 1), dtype=np.int64))
            return self._cells
        comm = ctx.comm
        nown = ctx.owned
        b = g.mbc
        x, y = (c[:nown] for c in geometry.centers_host)
        xi = x[:, b:-b, b:-b]
        yi = y[:, b:-b, b:-b]
        dx, dy = g.dx[:nown], g.dy[:nown]
        xlower, ylower = g.xlower[:nown], g.ylower[:nown]
        area = (dx * dy)[:, None, None] * np.ones_like(xi)
        cells = []
        bits = np.zeros(xi.shape, dtype=np.int64)
        for s, src in enumerate(self.sources):
            sel = (xi - src.x) ** 2 + (yi - src.y) ** 2 <= src.radius**2
            parts = [area[sel]] if comm is None else comm.allgather(area[sel])
            if not any(len(part) for part in parts):  # the leaf cell containing the centre
                ip = np.flatnonzero(
                    (xlower <= src.x) & (src.x < xlower + g.mx * dx)
                    & (ylower <= src.y) & (src.y < ylower + g.my * dy)
                )
                found = [len(ip) > 0] if comm is None else comm.allgather(len(ip) > 0)
                if not any(found):
                    raise ValueError(f"discharge source at ({src.x}, {src.y}) lies outside "
                                     "the domain")
                sel = np.zeros_like(sel)
                if found.index(True) == (0 if comm is None else comm.rank):
                    p = int(ip[0])
                    i = min(int((src.x - xlower[p]) / dx[p]), g.mx - 1)
                    j = min(int((src.y - ylower[p]) / dy[p]), g.my - 1)
                    sel[p, j, i] = True
                parts = [area[sel]] if comm is None else comm.allgather(area[sel])
            bits[sel] |= np.int64(1) << s
            cells.append((np.nonzero(sel), float(np.concatenate(parts).sum())))
        self._cells = cells
        self._cell_bits = ctx.backend.to_device(bits)
        self._cells_for = g
        self._level_share.clear()
        return cells

    def _shares(self, ctx):
        """Per source, the share of its area on the patches of the call (1 unless one
        level of a subcycled step): made once per level and regrid, on the host."""
        cells = self._source_cells(ctx)
        rows = ctx.rows_host
        if rows is None:
            return [1.0] * len(cells)
        got = self._level_share.get(id(rows))
        if got is not None and got[0] is rows:
            return got[1]
        g = ctx.geometry.host
        here = np.zeros(g.npatch, dtype=bool)
        here[rows] = True
        shares = [float((g.dx * g.dy)[idx[0][here[idx[0]]]].sum()) / area
                  for idx, area in cells]
        if len(self._level_share) > 64:
            self._level_share.clear()
        self._level_share[id(rows)] = (rows, shares)
        return shares

    # ------------------------------------------------------------------ counters
    def _commit(self):
        """The hook runs before the step's Courant number is checked: the counts of a
        call become final once the simulation has accepted its step."""
        if self._pending is not None and self.sim is not None and \
                self.sim.steps > self._pending[0]:
            self._accept()

    def _accept(self):
        self._added += self._pending[1]
        self._moved.extend(self._pending[2])
        self._pending = None
        if len(self._moved) > 256:  # a few device sums per 256 steps, no transfer
            self._moved_folded = self._moved_folded + self._moved_sum(self._moved)
            self._moved = []

    @staticmethod
    def _moved_sum(parts):
        arrays = [p for p in parts if hasattr(p, "shape")]
        floats = sum(float(p) for p in parts if not hasattr(p, "shape"))
        if not arrays:
            return floats
        from forestpy.backend import array_module

        xp = array_module(arrays[0])
        return xp.stack(arrays)[:, 1].sum() + floats

    @property
    def volume_added(self) -> float:
        """Volume injected by the discharge sources in the accepted steps."""
        self._commit()
        return float(self._added)

    @property
    def volume_redistributed(self) -> float:
        """Volume moved by the positivity fix in the accepted steps (kept on the device;
        one host transfer on the GPU)."""
        self._commit()
        v = self._moved_folded + self._moved_sum(self._moved)
        if hasattr(v, "shape"):
            v = self.sim.backend.to_host(v) if self.sim is not None else np.asarray(v)
        return float(v)

    # ------------------------------------------------------------------ hook
    def _constants(self, dt):
        c = self.coriolis
        mode = 0 if c is None else (2 if c.beta != 0.0 else 1)
        theta = c.f0 * dt if mode == 1 else 0.0
        floats = (float(dt), self.grav, self.dry_tolerance, self.manning,
                  self.friction_depth, 0.0 if c is None else c.f0,
                  0.0 if c is None else c.beta, 0.0 if c is None else c.y0,
                  math.cos(theta), math.sin(theta), self.speed_limit)
        friction = self.manning_aux is not None or self.manning > 0.0
        ints = (-1 if self.manning_aux is None else int(self.manning_aux), int(friction),
                int(math.isfinite(self.friction_depth)), mode,
                int(math.isfinite(self.speed_limit)), len(self.sources))
        return floats, ints

    def apply(self, q, aux, context) -> None:
        """Update the interiors of the rows ``context.rows`` of ``q`` (every owned row
        when None) in place: two launches, :data:`POSITIVITY_SUMS` then
        :func:`_sources_cell` on every cell; no host synchronisation on one rank.

        Negative depths are set to zero and the missing volume taken from the other
        cells of the same patch in proportion to their depth (sums per patch); what a
        patch cannot cover (it holds less water than it lacks) is taken from every
        cell of the domain, the other levels' included, in proportion (the factor
        derived by the last block of the first launch; in a distributed run after one
        reduction over the ranks, every rank calling the hook).  The volume is kept to
        round-off; where no depth is negative the positivity fix changes no bit."""
        ctx = context
        self._source_cells(ctx)
        ints = self._constants(ctx.dt)[1]
        block = ctx.step_params
        if block is None:
            floats = self._constants(ctx.dt)[0]
            increments = self._increments(ctx.t, ctx.dt)
        else:  # on a GPU from the step's parameter block: a captured step replays
            floats = block.values((self, "constants"), self._float_constants, ctx.t, ctx.dt)
            increments = block.values((self, "increments"), self._increments, ctx.t, ctx.dt)
        g = ctx.geometry
        nall = q.shape[0]
        slot = self._slots(ctx)
        flags = ints + (0 if slot is None else 1, 1 if ctx.comm is None else 0)
        slot = self._no_slots(ctx) if slot is None else slot
        be = ctx.backend
        partial = self._partial
        if partial is None or partial.shape[0] != ctx.n or not isinstance(
                partial, type(q)):  # kept between calls: no allocation per step
            partial = self._partial = be.xp.empty((ctx.n, POSITIVITY_SUMS.nvals),
                                                  dtype=np.float64)
            self._totals = be.xp.empty(POSITIVITY_SUMS.nvals + POSITIVITY_SUMS.ndomain + 1,
                                       dtype=np.float64)
        totals = for_each_patch(POSITIVITY_SUMS, ctx.n, g.my, g.mx, g.mbc, q, g.area, slot,
                                flags, backend=be, rows=ctx.rows, nall=nall,
                                partial=partial, totals=self._totals)
        moved = totals
        if ctx.comm is not None:
            moved, totals = self._leftover_over_ranks(q, ctx, totals)
        # the other levels' patches are visited too: they give their share of a deficit
        # their level-mates could not cover (rare; nothing to do otherwise)
        for_each_cell(_sources_cell, nall if flags[_SLOTS] else ctx.n, g.my, g.mx, g.mbc,
                      q, aux, g.ylower, g.dy, partial, totals, slot, self._cell_bits,
                      increments, floats, flags, backend=be,
                      rows=None if flags[_SLOTS] else ctx.rows)
        if not ctx.capturing:
            self._count(ctx, moved)

    def graph_replay(self, context) -> None:
        """The counts of a call that a replayed CUDA graph made (its launches were
        captured from :meth:`apply` with this context's sizes; see
        :mod:`forestpy.step_graph`): no launch but a copy of the call's totals."""
        self._count(context, self._totals)

    def _count(self, ctx, moved) -> None:
        """Keep the volume added and moved by a call until its step is accepted: the
        calls of one step (one per level when the levels subcycle) add up; a call not
        followed by an accepted step is discarded."""
        if self._pending is not None and ctx.step > self._pending[0]:
            self._accept()  # the simulation accepted the step of the pending counts
        key = (ctx.step, ctx.rejected)
        pending = self._pending if self._pending is not None and \
            self._pending[3] == key else (ctx.step, 0.0, [], key)
        added = 0.0
        for src, share in zip(self.sources, self._shares(ctx)):
            rate = src.rate(ctx.t)
            if rate > 0.0:
                added += rate * ctx.dt if share == 1.0 else rate * ctx.dt * share
        if hasattr(moved, "shape"):  # the totals' buffer is the next call's too
            moved = moved.copy()
        self._pending = (pending[0], pending[1] + added, pending[2] + [moved], key)

    def _float_constants(self, t, dt):
        return self._constants(dt)[0]

    def _increments(self, t, dt) -> tuple:
        """Depth added to a source's cells in a step ``dt`` from ``t`` (one entry at
        least)."""
        rates = [src.rate(t) for src in self.sources]
        return tuple(r * dt / area if r > 0.0 else 0.0
                     for r, (_, area) in zip(rates, self._cells)) or (0.0,)

    def _slots(self, ctx):
        """Batch row of every owned patch (-1: not in the call), a backend array made
        once per level and regrid; None when the call has every owned patch."""
        rows = ctx.rows_host
        if rows is None:
            return None
        got = self._level_slots.get(id(rows))
        if got is not None and got[0] is rows and got[1] is ctx.geometry.host:
            return got[2]
        slot = np.full(ctx.owned, -1, dtype=np.int64)
        slot[rows] = np.arange(len(rows))
        if len(self._level_slots) > 64:
            self._level_slots.clear()
        slot = ctx.backend.to_device(slot)
        self._level_slots[id(rows)] = (rows, ctx.geometry.host, slot)
        return slot

    def _no_slots(self, ctx):
        if self._no_slot is None or self._no_slot[0] is not ctx.backend:
            self._no_slot = (ctx.backend, ctx.backend.to_device(np.zeros(1, np.int64)))
        return self._no_slot[1]

    def _leftover_over_ranks(self, q, ctx, totals):
        """The domain-wide factor over all ranks (the kernel's is this rank's): one
        reduction of the uncovered deficit and the volume moved, another of the volume
        (the other levels' included) when a deficit is left; returns (volume moved on
        all ranks, totals with the factor)."""
        host = np.array(ctx.backend.to_host(totals), dtype=np.float64)
        leftover, moved = ctx.allreduce(np.array([host[_LEFTOVER], host[_MOVED]]))
        glob = 1.0
        if leftover > 0.0:
            volume = float(host[_VOLUME] - host[_COVERED])
            if ctx.rows_host is not None:  # one level's rows: the others give too
                others = np.ones(q.shape[0], dtype=bool)
                others[ctx.rows_host] = False
                others = ctx.backend.to_device(np.flatnonzero(others))
                b = ctx.geometry.mbc
                depth = q[others, 0, b:-b, b:-b].sum(axis=(1, 2))
                area = ctx.geometry.area[others]
                volume += float(ctx.backend.to_host((depth * area).sum()))
            volume = ctx.allreduce(volume)
            glob = 1.0 - leftover / (volume if volume > 0.0 else 1.0)
        if glob != host[_GLOBAL]:
            host[_GLOBAL] = glob
            totals = ctx.backend.to_device(host)
        return float(moved), totals

    def __call__(self, q, aux, x, y, t, dt):
        """The array-level ``src2`` contract on every owned patch of the bound
        simulation (``x``, ``y`` unused: the kernel derives the centres)."""
        self.apply(q, aux, self._context(t, dt))
